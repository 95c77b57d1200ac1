"""What a supervisor does when a child dies: dispose of its jobs, plan its replacement.

A child stopped to give its job back (HUP, its term grace over, or killed by a forced stop)
has every job it held released: back to waiting, no retry spent. A child killed for its time
limit or by USR1 has its running job failed. In every case the jobs it held ahead and never
started are released, while the job it ran after a crash or lock loss is left to its lease
(a crash spends a retry, so a job that kills its worker fails once its retries are gone). A
child that dies right after its start, again and again, is respawned with a growing back-off.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from django_qless.core.exceptions import QlessConnectionError, QlessError
from django_qless.core.workers.hand import release_job
from django_qless.core.workers.runner import child_extra, stopped_failure
from django_qless.core.workers.shards import served_clients
from django_qless.core.workers.shutdown import ExitCode

if TYPE_CHECKING:
    from django_qless.core.workers.hand import SharedJobPool
    from django_qless.core.workers.shards import Deployment
    from django_qless.core.workers.shutdown import SignalState
    from django_qless.core.workers.supervision import ChildChannels, ChildProc
    from django_qless.core.workers.worker_config import WorkerConfig

__all__ = ["ChildDisposal"]

log = logging.getLogger("django_qless.worker")


class ChildDisposal:
    """The child-death side of ForkingWorker (a mixin: the supervisor owns the attributes)."""

    config: WorkerConfig
    name: str
    signals: SignalState
    client: Deployment | None
    channels: ChildChannels | None
    failed: int
    free_slots: list[int]
    slot_failures: list[int]
    slot_ready_at: list[float]
    _releaser: Deployment | None
    _redis_down: bool
    _unreleased: int
    pool: SharedJobPool | None

    def _after_death(self, child: ChildProc, code: int) -> None:
        """Dispose of the dead child's job and plan its replacement."""
        assert self.client is not None and self.channels is not None
        self.channels.remove(child.name)
        reason = child.kill_reason
        # (it gave up its job to stop: its own term grace ran out, or a HUP reached it)
        if reason is None and code == ExitCode.CHILD_ABORTED:
            reason = "shutdown"
        if code == 0 and reason is None:
            # Not a crash: it reached its bound, or was told to stop.
            why = child.left or ("stopped as asked" if self.signals.stopping else "left")
            log.info("child %s (pid %d) finished: %s", child.name, child.pid, why)
        else:
            level = logging.INFO if code == 0 or reason else logging.ERROR
            log.log(level, "child %s (pid %d) exited with %d (%s)%s", child.name, child.pid,
                    code, reason or "unexpected", f", job {child.jid}" if child.jid else "",
                    extra=child_extra(child) if child.jid else None)
        try:
            if reason in ("shutdown", "forced"):
                self._release_all(child)
            else:
                if reason in ("timeout", "killed") and child.jid:
                    self._fail(child, reason)
                self._release_ahead(child, deregister=child.jid is None or code == 0)
        except QlessError as exc:
            log.error("could not dispose of child %s's job: %s", child.name, exc)
            if reason in ("shutdown", "forced"):
                self._unreleased += 1
        uptime = time.monotonic() - child.started
        crashed = code != 0 and reason is None
        if crashed and uptime < self.config.respawn_min_uptime:
            self.slot_failures[child.slot] += 1
            delay = min(0.1 * 2 ** self.slot_failures[child.slot], self.config.respawn_max_backoff)
            log.warning("child slot %d dies quickly; respawning in %.1fs", child.slot, delay)
            self.slot_ready_at[child.slot] = time.monotonic() + delay
        else:
            self.slot_failures[child.slot] = 0
            self.slot_ready_at[child.slot] = 0.0
        self.free_slots.append(child.slot)

    def _release_ahead(self, child: ChildProc, *, deregister: bool) -> None:
        """Release the jobs a dead child held ahead: they never started, so no retry is spent.

        The job it ran (`child.jid`) was failed, or is left to its lease: a crash counts.
        """
        for client in served_clients(self._release_client(), self.config.queues):
            for jid in client.workers[child.name]["jobs"]:
                if jid != child.jid and release_job(client, jid, child.name) and self.pool:
                    self.pool.give_back(1)  # never started: its --max-jobs ticket is free again
            if deregister:
                client.workers.deregister(child.name)

    def _release_all(self, child: ChildProc) -> None:
        """Release every job the dead child still held (including one not yet reported)."""
        if self._redis_down:
            self._unreleased += 1
            return
        try:
            for client in served_clients(self._release_client(), self.config.queues):
                jids = set(client.workers[child.name]["jobs"])
                if child.jid and client is self._release_client().for_queue(child.queue or ""):
                    jids.add(child.jid)
                for jid in sorted(jids):
                    try:
                        release_job(client, jid, child.name)
                    except QlessConnectionError:
                        raise
                    except QlessError as exc:
                        log.error("job %s: could not release (%s); its lease will expire",
                                  jid, exc)
                        self._unreleased += 1
                client.workers.deregister(child.name)
        except QlessConnectionError as exc:
            # Redis is unreachable or silent: don't wait a timeout per job; the leases
            # expire and the jobs come back to another worker anyway.
            log.error("could not release child %s's jobs (%s); their leases will expire",
                      child.name, exc)
            self._unreleased += 1
            self._redis_down = True

    def _release_client(self) -> Deployment:
        """Return a client with a short socket timeout for releasing jobs at shutdown."""
        if self._releaser is None:
            timeout = min(5.0, max(0.5, self.config.shutdown_grace / 2))
            self._releaser = self.config.make_client(worker_name=self.name,
                                                     socket_timeout=timeout)
        return self._releaser

    def _fail(self, child: ChildProc, reason: str) -> None:
        assert self.client is not None and child.jid is not None
        client = self.client.for_queue(child.queue or "")
        reply = client.call_json("get", child.jid)
        if not reply or reply.get("state") != "running" or reply.get("worker") != child.name:
            return
        group, text = stopped_failure(reason, child.limit)
        client.call("fail", child.jid, child.name, group,
                         f"{text} on worker {child.name} (pid {child.pid})")
        self.failed += 1
