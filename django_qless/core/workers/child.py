"""A forked child: the fork (`spawn_child`), the child's job loop (`ForkChild`), the
supervisor's view of it (`ChildProc`), and the status lines between the two over a pipe.

A job's end line rides with the next start line (one write per job) unless the child idles,
pauses or leaves. QUIT, or a TERM to the process group, drains; HUP (the supervisor's "give
it back", or the kernel's when the supervisor dies) aborts the job.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import random
import select
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

from django_qless.core.exceptions import QlessConnectionError, QlessError
from django_qless.core.worker_options import WorkerConfig, default_worker_name
from django_qless.core.workers.channels import HeardAborts
from django_qless.core.workers.hand import SharedJobPool, release_job
from django_qless.core.workers.loop import JobLoop
from django_qless.core.workers.runner import Outcome, stopped_failure
from django_qless.core.workers.shutdown import ExitCode, SignalState, reset_child_signals

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.job import Job
    from django_qless.core.types import QlessClient
    from django_qless.core.workers.forking import ForkingWorker

__all__ = ["ChildProc", "ForkChild", "parse_status_line", "set_parent_death_signal",
           "spawn_child", "status_line", "taken_away"]

log = logging.getLogger("django_qless.worker")

_PR_SET_PDEATHSIG = 1
_BLOCKED = {*SignalState.HANDLED, signal.SIGCHLD}
_DEFERRED = frozenset({Outcome.COMPLETED, Outcome.SETTLED, Outcome.FAILED})
_FIELD_CUT = str.maketrans("\t\n\r", "   ")
_GO_WITHIN = 5.0  # seconds a new child waits at most for its channel to be confirmed
# With the parent-death signal armed (the kernel's HUP), getppid() is only a backstop, checked
# this rarely while waiting for the leader token (100 idle children waking cost ~0.15 ms).
_CHECK_WITH_DEATH_SIGNAL = 10.0


def status_line(event: str, *fields: str) -> str:
    """Return one status line: the event letter and its fields, tab-separated (no tab inside).

    Events: `s jid queue klass token limit` (start; token: the pop's attempt token; limit:
    its hard time limit, 0: none), `e jid outcome`, `l jid why` (lock lost), `x why` (leaves).
    """
    return "\t".join((event, *(f.translate(_FIELD_CUT) for f in fields))) + "\n"


def parse_status_line(line: bytes) -> tuple[str, list[str]]:
    """Split a status line into its event letter and fields."""
    event, *fields = line.decode("utf-8", "replace").split("\t")
    return event, fields


def _child_name(config: WorkerConfig, slot: int, pid: int | None = None) -> str:
    """Return the worker name of the child in `slot` (with process id `pid`)."""
    return f"{config.name}-{slot}" if config.name else default_worker_name(pid)


def set_parent_death_signal(signum: int) -> bool:
    """Ask Linux to send `signum` to this process when its parent dies (False elsewhere)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


@dataclass
class ChildProc:
    """The supervisor's view of one live child: its pipes, its job, why it was killed."""

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
    limit: float = 0.0  # `jid`'s hard time limit in seconds (0: none)
    kill_reason: str | None = None
    term_sent: float = 0.0
    left: str | None = None  # why the child says it leaves on its own (status line `x`)
    buffer: bytes = b""
    unsure: bool = False  # its job started while its channel may not have been heard
    aborted: HeardAborts = field(default_factory=HeardAborts)  # (for jobs not started yet)

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

    def fail_running(self, shard: Client, reason: str) -> bool:
        """Fail the job its time limit or USR1 killed it running, if still its own in Redis."""
        reply = shard.call_json("get", self.jid)
        if not reply or reply.get("state") != "running" or reply.get("worker") != self.name:
            return False
        group, text = stopped_failure(reason, self.limit)
        shard.call("fail", self.jid, self.name, group,
                   f"{text} on worker {self.name} (pid {self.pid})")
        return True

    def release_held(self, shard: Client, running: bool, pool: SharedJobPool | None) -> int:
        """Release its jobs in `shard` held ahead (`running`: and the one it ran); return how
        many could not be (QlessConnectionError: Redis is unreachable or silent)."""
        jids = set(shard.workers[self.name]["jobs"]) - {self.jid}
        unreleased = 0
        for jid in sorted(jids | ({self.jid} if running and self.jid else set())):
            try:
                # (a job held ahead never started: no retry spent, its ticket free again)
                if release_job(shard, jid, self.name) and pool and jid != self.jid:
                    pool.give_back(1)
            except QlessConnectionError:
                raise
            except QlessError as exc:
                log.error("job %s: could not release (%s); its lease will expire", jid, exc)
                unreleased += 1
        return unreleased

    def backoff(self, unexpected: bool, min_uptime: float, max_delay: float) -> float:
        """Count a quick unexpected death; return how long its slot waits (0: at once)."""
        if not unexpected or time.monotonic() - self.started >= min_uptime:
            self.failures = 0
            return 0.0
        self.failures += 1
        return min(0.1 * 2.0 ** self.failures, max_delay)

    def let_go(self, confirmed: bool = True) -> None:
        """Let the child take jobs (a byte, and the pipe closed) once its channel is confirmed
        in every shard, or after _GO_WITHIN: before, a job's cancel could go unheard."""
        if self.go_fd < 0:
            return
        if not confirmed:
            if time.monotonic() - self.started < _GO_WITHIN:
                return
            log.warning("child %s: its channel is not confirmed after %gs; letting it take "
                        "jobs anyway", self.name, _GO_WITHIN)
        with contextlib.suppress(OSError):  # (the child is gone)
            os.write(self.go_fd, b"g")
        os.close(self.go_fd)
        self.go_fd = -1


def taken_away(client: QlessClient, children: Iterable[ChildProc]) -> list[tuple[ChildProc, str]]:
    """Return the (child, jid) whose running attempt Redis no longer gives to the child."""
    by_shard: dict[Client, list[ChildProc]] = {}
    for c in children:
        if c.jid is not None and c.kill_reason is None:
            by_shard.setdefault(client.for_queue(c.queue or ""), []).append(c)
    lost: list[tuple[ChildProc, str]] = []
    for shard, running in by_shard.items():
        owned = shard.workers.still_hold([(c.jid or "", c.name, c.token or "")
                                          for c in running])
        lost += [(c, c.jid or "") for c, mine in zip(running, owned, strict=True) if not mine]
    return lost


class ForkChild(JobLoop):
    """A job loop that reports to its supervisor and stops when the supervisor dies."""

    def __init__(self, supervisor: ForkingWorker, supervisor_pid: int, name: str,
                 status_fd: int, *, resume: bool, death_signal: bool) -> None:
        config, token = supervisor.config, supervisor.leader_token
        super().__init__(config, supervisor.hooks, name,
                         SignalState(term_grace=config.term_grace), resume=resume,
                         max_jobs=config.jobs_per_child, pool=supervisor.pool,
                         leader_token=token)
        self.status_fd = status_fd
        self.supervisor_pid = supervisor_pid
        self.group = supervisor.name  # (its beats show this child alive)
        self.exit_code = ExitCode.OK
        # Orders the job thread's and the heartbeat thread's writes and the deferred line.
        self._status_lock = threading.Lock()
        self._deferred = ""
        self._job_started = 0.0
        if death_signal:
            self.check_every = _CHECK_WITH_DEATH_SIGNAL

    def tell(self, line: str, *, defer: bool = False) -> None:
        """Send a status line after any deferred one (`defer`: keep it for the next write)."""
        with self._status_lock:
            self._deferred += line
            if defer or not self._deferred:
                return
            text, self._deferred = self._deferred, ""
            # Fields are capped (jid, queue: 64; klass: 200; why: 500): under PIPE_BUF.
            with contextlib.suppress(OSError):  # (the supervisor is gone: should_continue)
                os.write(self.status_fd, text.encode("utf-8"))

    def orphaned(self) -> bool:
        """Tell whether the supervisor has died (no Redis call)."""
        return os.getppid() != self.supervisor_pid

    def should_continue(self) -> bool:
        if self.orphaned():
            log.warning("%s: supervisor %d is gone; stopping", self.name, self.supervisor_pid)
            self.exit_code = ExitCode.CHILD_ORPHANED
            return False
        return True

    def on_signal(self, signum: int) -> None:
        """Abort the job on TERM at its time limit (the supervisor's), or on a stop."""
        if signum in (signal.SIGTERM, signal.SIGHUP):
            limit = self.limits.hard
            if limit and time.monotonic() - self._job_started >= limit:
                self.guard.abort("timeout", same_thread=True)
            elif self.signals.stop_requests:
                self.guard.abort("shutdown", same_thread=True)

    def on_job_start(self, job: Job) -> None:
        self._job_started = time.monotonic()
        klass = job.klass_name[:200].translate(_FIELD_CUT)  # (jid, queue: engine-checked)
        self.tell(f"s\t{job.jid}\t{job.queue_name}\t{klass}\t{job.attempt_token}\t"
                  f"{self.limits.hard!r}\n")

    def report(self, job: Job, outcome: Outcome) -> None:
        super().report(job, outcome)
        # An aborted or lost job matters to the supervisor now; a settled one rides along.
        self.tell(f"e\t{job.jid}\t{outcome.value}\n", defer=outcome in _DEFERRED)

    def between_jobs(self) -> None:
        self.tell("")

    def _finish(self) -> None:
        why = self._leaving_reason()
        self.tell(status_line("x", why) if why else "")
        super()._finish()

    def _leaving_reason(self) -> str:
        """Say why the loop ended on its own (empty: stopped, orphaned or crashed)."""
        budget, taken = self.hand, self.hand.taken
        if self.signals.stop_requests:
            return ""
        if self.signals.graceful:
            return "stopped as asked (QUIT)"
        if budget.cap and budget.claimed >= budget.cap and taken >= budget.cap:
            if self.config.fork_per_job:
                return "ran its job (--fork-per-job)"
            return f"recycled after {taken} job{'s' * (taken != 1)} (--child-max-jobs)"
        if budget.pool is not None and budget.pool.remaining() == 0:
            return f"--max-jobs reached (this child ran {taken})"
        return "--max-duration reached" if self._time_left() <= 0 else ""

    def on_lock_lost(self, job: Job, why: str) -> None:
        # The supervisor kills us: aborting here could race it onto the next job.
        self.tell(status_line("l", job.jid, why[:500]))
        if self.orphaned():
            self.guard.abort("lock_lost")

    def on_aborted(self, job: Job, reason: str) -> bool:
        if reason not in ("timeout", "shutdown"):
            return False
        self.exit_code = ExitCode.CHILD_ABORTED  # (the supervisor disposes of the job)
        if reason == "shutdown" and self.orphaned():
            self.exit_code = ExitCode.CHILD_ORPHANED
            try:
                release_job(job.client, job.jid, self.name)
            except QlessError as exc:
                log.error("job %s: could not release (%s)", job.jid, exc)
        return True


def spawn_child(supervisor: ForkingWorker, slot: int, failures: int, resume: bool) -> ChildProc:
    """Fork the child of `slot`; return the supervisor's view of it."""
    status_read, status_write = os.pipe()
    go_read, go_write = os.pipe()
    wake = supervisor.signals.wake_pipe
    inherited = [status_read, go_write, wake.read_fd, wake.write_fd,
                 *(fd for c in supervisor.children.values() for fd in (c.status_fd, c.go_fd))]
    # Hold signals across the fork: one sent to a brand-new child before it has its own
    # handlers would otherwise hit the supervisor's inherited ones and be lost (a QUIT
    # lost that way leaves a child running forever). The child unblocks once ready.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
    # Taken before the fork: a child asking getppid() later could already see its
    # new parent (init) if we die first, and would never notice it was orphaned.
    supervisor_pid = os.getpid()
    try:
        pid = os.fork()
        if pid == 0:
            _child_main(supervisor, supervisor_pid, slot, (status_write, go_read, inherited),
                        resume, mask)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    os.close(status_write)
    os.close(go_read)
    os.set_blocking(status_read, False)
    name = _child_name(supervisor.config, slot, pid)
    return ChildProc(slot, pid, name, status_read, go_write, failures)


def _child_main(supervisor: ForkingWorker, supervisor_pid: int, slot: int,
                fds: tuple[int, int, list[int]], resume: bool,
                signal_mask: Iterable[int]) -> NoReturn:
    """Run a freshly forked child and leave with `os._exit` (`fds`: its status pipe, its go
    pipe, the supervisor's descriptors to close). Signals arrive blocked until its own
    handlers are installed; it takes no job before the go pipe says so."""
    status_fd, go_fd, inherited = fds
    code = int(ExitCode.CHILD_CRASHED)
    try:
        for fd in inherited:
            with contextlib.suppress(OSError):  # (-1: a child's go pipe closed already)
                os.close(fd)
        reset_child_signals()
        armed = set_parent_death_signal(signal.SIGHUP)
        random.seed()
        supervisor.hooks.after_fork_child()
        child = ForkChild(supervisor, supervisor_pid, _child_name(supervisor.config, slot),
                          status_fd, resume=resume, death_signal=armed)
        child.arm_signals(child.on_signal)
        # Ctrl-C reaches the whole process group, and USR1 kills a child: the supervisor's.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        child.signals.paused = supervisor.signals.paused  # (born during USR2: paused too)
        signal.pthread_sigmask(signal.SIG_SETMASK, signal_mask)
        _await_go(go_fd, child)
        if child.orphaned():
            code = ExitCode.CHILD_ORPHANED
        else:
            child.run()
            code = child.exit_code
    except BaseException:
        log.exception("worker child crashed")
    finally:
        with contextlib.suppress(Exception):  # (leaving anyway)
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _await_go(go_fd: int, child: ForkChild, bound: float = 10.0) -> None:
    """Wait for the go pipe (a byte, or its end), a stop, the supervisor's death, or `bound`
    seconds (a stuck supervisor)."""
    deadline = time.monotonic() + bound
    try:
        while time.monotonic() < deadline and not child.signals.stopping:
            if select.select([go_fd], [], [], 0.25)[0] or child.orphaned():
                return
    finally:
        os.close(go_fd)
