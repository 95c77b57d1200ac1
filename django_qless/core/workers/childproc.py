"""The supervisor's side of one forked child (`ChildProc`), and what becomes of its jobs.

A stop releases every job a dead child held; its time limit or USR1 fails the job it ran. The
jobs held ahead are always released; the job of a child that crashed or lost its lock is left
to its lease (a crash spends a retry).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django_qless.core.exceptions import QlessConnectionError, QlessError
from django_qless.core.workers.channels import HeardAborts, attempts_still_owned
from django_qless.core.workers.child import parse_status_line
from django_qless.core.workers.hand import SharedJobPool, release_job
from django_qless.core.workers.runner import stopped_failure
from django_qless.core.workers.shards import served_clients

if TYPE_CHECKING:
    from django_qless.core.workers.shards import Deployment

__all__ = ["ChildProc", "fail_running", "release_held", "taken_away"]

log = logging.getLogger("django_qless.worker")


@dataclass
class ChildProc:
    """One live child: its pipes, the job it reports running, and why it was killed."""

    slot: int
    pid: int
    name: str
    status_fd: int
    go_fd: int  # lets the child take jobs once written (-1: done; see let_go)
    failures: int = 0  # quick deaths in a row in its slot (the respawn back-off)
    started: float = field(default_factory=time.monotonic)
    jid: str | None = None
    token: str | None = None  # the attempt token of `jid`'s pop (see attempts_still_owned)
    klass: str | None = None
    queue: str | None = None
    job_started: float = 0.0
    limit: float = 0.0  # `jid`'s hard time limit in seconds (0: none), from its start line
    kill_reason: str | None = None
    term_sent: float = 0.0
    left: str | None = None  # why the child says it leaves on its own (status line `x`)
    buffer: bytes = b""
    unsure: bool = False  # its job started while its channel may not have been heard
    # Abort events heard for jobs it had not reported starting (popped, or held ahead).
    aborted: HeardAborts = field(default_factory=HeardAborts)

    def read_status(self, unsure: bool, outcomes: Counter[str]) -> None:
        """Read the status lines written so far (`unsure`: events may go unheard now)."""
        try:
            while chunk := os.read(self.status_fd, 65536):
                self.buffer += chunk
        except BlockingIOError:
            pass
        except OSError:
            return
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            event, fields = parse_status_line(line)
            if event == "s" and len(fields) == 5:
                self.jid, self.queue, self.klass, self.token, limit = fields
                self.limit = float(limit)
                self.job_started = time.monotonic()
                # Re-checked in Redis (by the attempt token) once the channels are confirmed.
                self.unsure = unsure or self.aborted.heard(self.jid)
            elif event == "e" and len(fields) == 2:
                outcomes[fields[1]] += 1
                # An aborted job is still held by the child: the supervisor disposes of it.
                if self.jid == fields[0] and fields[1] != "aborted":
                    self.jid = self.klass = self.queue = self.token = None
            elif event == "x" and fields:
                self.left = fields[0]
            elif event == "l" and fields and self.jid == fields[0]:
                log.warning("child %s: heartbeat lost %s's lock; killing it", self.name, self.jid)
                self.kill("lock_lost", signal.SIGKILL)

    def kill(self, reason: str | None, signum: int) -> None:
        """Send `signum`, noting why (a forced stop or a lost lock overrides other reasons)."""
        if reason and (self.kill_reason is None or reason in ("forced", "lock_lost")):
            self.kill_reason = reason
        if signum == signal.SIGTERM:
            self.term_sent = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def let_go(self) -> None:
        """Let the child take jobs (one byte, and the pipe closed)."""
        if self.go_fd >= 0:
            with contextlib.suppress(OSError):  # (the child is gone)
                os.write(self.go_fd, b"g")
            os.close(self.go_fd)
            self.go_fd = -1

    def backoff(self, code: int, min_uptime: float, max_delay: float) -> float:
        """Count a quick unexpected death; return how long its slot waits (0: at once)."""
        if code == 0 or self.kill_reason or time.monotonic() - self.started >= min_uptime:
            self.failures = 0
            return 0.0
        self.failures += 1
        return min(0.1 * 2.0 ** self.failures, max_delay)


def taken_away(client: Deployment, children: Iterable[ChildProc]) -> list[tuple[ChildProc, str]]:
    """Return the (child, jid) whose running attempt Redis no longer gives to the child."""
    shards: dict[int, tuple[Any, list[ChildProc]]] = {}
    for c in children:
        if c.jid is not None and c.kill_reason is None:
            shard = client.for_queue(c.queue or "")
            shards.setdefault(id(shard), (shard, []))[1].append(c)
    lost: list[tuple[ChildProc, str]] = []
    for shard, running in shards.values():
        owned = attempts_still_owned(shard, [(c.jid or "", c.name, c.token or "")
                                             for c in running])
        lost += [(c, c.jid or "") for c, mine in zip(running, owned, strict=True) if not mine]
    return lost


def release_held(child: ChildProc, client: Deployment, queues: Sequence[str],
                 pool: SharedJobPool | None, *, running: bool, deregister: bool) -> int:
    """Release the jobs the child held ahead (with `running`, the one it ran too: a stop);
    return how many could not be (QlessConnectionError: Redis is unreachable or silent)."""
    unreleased = 0
    for shard in served_clients(client, queues):
        jids = set(shard.workers[child.name]["jobs"]) - {child.jid}
        if running and child.jid and shard is client.for_queue(child.queue or ""):
            jids.add(child.jid)
        for jid in sorted(jids):
            try:
                # (a job held ahead never started: no retry spent, its ticket free again)
                if release_job(shard, jid, child.name) and pool and jid != child.jid:
                    pool.give_back(1)
            except QlessConnectionError:
                raise
            except QlessError as exc:
                log.error("job %s: could not release (%s); its lease will expire", jid, exc)
                unreleased += 1
        if deregister:
            shard.workers.deregister(child.name)
    return unreleased


def fail_running(child: ChildProc, client: Deployment, reason: str) -> bool:
    """Fail the job a child killed at its time limit or by USR1 ran (if still its own)."""
    assert child.jid is not None
    shard = client.for_queue(child.queue or "")
    reply = shard.call_json("get", child.jid)
    if not reply or reply.get("state") != "running" or reply.get("worker") != child.name:
        return False
    group, text = stopped_failure(reason, child.limit)
    shard.call("fail", child.jid, child.name, group,
               f"{text} on worker {child.name} (pid {child.pid})")
    return True
