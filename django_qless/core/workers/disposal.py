"""What a supervisor does with a dead child's jobs: release them, or fail the one it ran.

A child stopped to give its job back (HUP, its term grace over, or a forced stop) has every
job it held released: back to waiting, no retry spent. A child killed for its time limit or
by USR1 has its running job failed. In every case the jobs it held ahead and never started
are released, while the job it ran after a crash or lock loss is left to its lease (a crash
spends a retry, so a job that kills its worker fails once its retries are gone).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis

from django_qless.core.exceptions import QlessConnectionError, QlessError
from django_qless.core.workers.hand import SharedJobPool, release_job
from django_qless.core.workers.runner import stopped_failure
from django_qless.core.workers.shards import Deployment, served_clients

if TYPE_CHECKING:
    from django_qless.core.workers.supervision import ChildProc
    from django_qless.core.workers.worker_config import WorkerConfig

__all__ = ["Disposer"]

log = logging.getLogger("django_qless.worker")


class Disposer:
    """Release or fail the jobs of dead children, on a short-timeout client of its own."""

    def __init__(self, config: WorkerConfig, name: str, client: Deployment,
                 pool: SharedJobPool | None) -> None:
        self.config, self.name, self.client, self.pool = config, name, client, pool
        self.unreleased = 0  # jobs a stop had to leave to their leases
        self.redis_down = False  # found unreachable while releasing: not asked again
        self._releaser: Deployment | None = None

    def dispose(self, child: ChildProc, reason: str | None, code: int) -> bool:
        """Dispose of a dead child's jobs; tell whether its running job was failed."""
        try:
            if reason in ("shutdown", "forced"):
                self._release_all(child)
                return False
            failed = reason in ("timeout", "killed") and child.jid is not None \
                and self._fail(child, reason)
            self._release_ahead(child, deregister=child.jid is None or code == 0)
            return bool(failed)
        except QlessError as exc:
            log.error("could not dispose of child %s's job: %s", child.name, exc)
            if reason in ("shutdown", "forced"):
                self.unreleased += 1
            return False

    def _release_ahead(self, child: ChildProc, *, deregister: bool) -> None:
        """Release the jobs held ahead (never started: no retry, their tickets free again)."""
        for client in served_clients(self._release_client(), self.config.queues):
            for jid in client.workers[child.name]["jobs"]:
                if jid != child.jid and release_job(client, jid, child.name) and self.pool:
                    self.pool.give_back(1)
            if deregister:
                client.workers.deregister(child.name)

    def _release_all(self, child: ChildProc) -> None:
        """Release every job the child still held (including one not yet reported)."""
        if self.redis_down:
            self.unreleased += 1
            return
        releaser = self._release_client()
        try:
            for client in served_clients(releaser, self.config.queues):
                jids = set(client.workers[child.name]["jobs"])
                if child.jid and client is releaser.for_queue(child.queue or ""):
                    jids.add(child.jid)
                for jid in sorted(jids):
                    try:
                        release_job(client, jid, child.name)
                    except QlessConnectionError:
                        raise
                    except QlessError as exc:
                        log.error("job %s: could not release (%s); its lease will expire",
                                  jid, exc)
                        self.unreleased += 1
                client.workers.deregister(child.name)
        except QlessConnectionError as exc:
            # Redis is unreachable or silent: don't wait a timeout per job; the leases
            # expire and the jobs come back to another worker anyway.
            log.error("could not release child %s's jobs (%s); their leases will expire",
                      child.name, exc)
            self.unreleased += 1
            self.redis_down = True

    def _release_client(self) -> Deployment:
        """Return a client with a short socket timeout: a silent Redis must not hold a stop."""
        if self._releaser is None:
            timeout = min(5.0, max(0.5, self.config.shutdown_grace / 2))
            self._releaser = self.config.make_client(worker_name=self.name,
                                                     socket_timeout=timeout)
        return self._releaser

    def _fail(self, child: ChildProc, reason: str) -> bool:
        assert child.jid is not None
        client = self.client.for_queue(child.queue or "")
        reply = client.call_json("get", child.jid)
        if not reply or reply.get("state") != "running" or reply.get("worker") != child.name:
            return False
        group, text = stopped_failure(reason, child.limit)
        client.call("fail", child.jid, child.name, group,
                    f"{text} on worker {child.name} (pid {child.pid})")
        return True

    def close(self) -> None:
        """Deregister the supervisor (unless Redis was found down) and drop the clients."""
        try:
            if not self.redis_down:
                for shard in served_clients(self._release_client(), self.config.queues):
                    shard.workers.deregister(self.name)
        except (QlessError, redis.RedisError):
            pass
        for client in (self.client, self._releaser):
            if client is not None:
                client.close()
