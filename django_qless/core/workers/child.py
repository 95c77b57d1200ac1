"""The life of one forked child: fresh state after fork, a job loop, `os._exit`.

The child runs jobs and reports each over a pipe (`status_line`); a job's end line rides
with the next start line (one write per job) unless the child idles, pauses or leaves.
QUIT, or a TERM to the process group, drains; HUP (the supervisor's "give it back", or the
kernel's when the supervisor dies) aborts the job, released by the child only if orphaned.
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
from collections.abc import Iterable
from typing import TYPE_CHECKING, NoReturn

from django_qless.core.exceptions import QlessError
from django_qless.core.worker_options import WorkerConfig, default_worker_name
from django_qless.core.workers.hand import SharedJobPool, release_job
from django_qless.core.workers.leadership import TokenFile, open_leadership
from django_qless.core.workers.loop import JobLoop
from django_qless.core.workers.runner import Outcome, WorkerHooksProtocol
from django_qless.core.workers.shutdown import ExitCode, SignalState, reset_child_signals

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["ForkChild", "child_main", "parse_status_line", "set_parent_death_signal", "status_line"]

log = logging.getLogger("django_qless.worker")

_PR_SET_PDEATHSIG = 1
_DEFERRED = frozenset({Outcome.COMPLETED, Outcome.SETTLED, Outcome.FAILED})
_FIELD_CUT = str.maketrans("\t\n\r", "   ")
# With the parent-death signal armed, the kernel's TERM tells an idle child its supervisor
# died; the getppid() check is then a backstop, so a child waiting for the leader token
# wakes for it this rarely (each wake-up of 100 idle children cost the host ~0.15 ms).
_CHECK_WITH_DEATH_SIGNAL = 10.0


def status_line(event: str, *fields: str) -> str:
    """Return one status line: the event letter and its fields, tab-separated (no tab inside).

    Events: `s jid queue klass token limit` (start; token: the pop's attempt token; limit:
    its hard time limit, 0: none), `e jid outcome`, `l jid why` (lock lost), `x why` (leaves).
    """
    return "\t".join((event, *(f.translate(_FIELD_CUT) for f in fields))) + "\n"


def _start_line(job: Job, limit: float) -> str:
    """Return the start line of `job` (hot path: jid and queue are engine-checked names)."""
    klass = job.klass_name[:200].translate(_FIELD_CUT)
    return f"s\t{job.jid}\t{job.queue_name}\t{klass}\t{job.attempt_token}\t{limit!r}\n"


def parse_status_line(line: bytes) -> tuple[str, list[str]]:
    """Split a status line into its event letter and fields."""
    event, *fields = line.decode("utf-8", "replace").split("\t")
    return event, fields


def set_parent_death_signal(signum: int) -> bool:
    """Ask Linux to send `signum` to this process when its parent dies (False elsewhere)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class ForkChild(JobLoop):
    """A job loop that reports to its supervisor and stops when the supervisor dies."""

    def __init__(
        self,
        config: WorkerConfig,
        hooks: WorkerHooksProtocol,
        name: str,
        status_fd: int,
        supervisor_pid: int,
        *,
        resume: bool,
        pool: SharedJobPool | None = None,
        leader_token: TokenFile | None = None,
        death_signal: bool = False,
    ) -> None:
        # Idle, only the holder of the worker's leader token waits on the engine.
        leadership = (open_leadership(leader_token, config.leader_hold)
                      if leader_token is not None else None)
        super().__init__(
            config, hooks, name, SignalState(term_grace=config.term_grace), resume=resume,
            max_jobs=config.jobs_per_child, pool=pool, leadership=leadership,
        )
        self.status_fd = status_fd
        self.supervisor_pid = supervisor_pid
        self.group = config.name or default_worker_name(supervisor_pid)  # (its beats)
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
            text, self._deferred = self._deferred + line, ""
            if defer:
                self._deferred = text
            elif text:
                # Fields are capped (jid, queue: 64; klass: 200; why: 500): under PIPE_BUF.
                with contextlib.suppress(OSError):  # (the supervisor is gone: should_continue)
                    os.write(self.status_fd, text.encode("utf-8"))

    def orphaned(self) -> bool:
        """Tell whether the supervisor has died (no Redis: checked every second while idle,
        every 10 s waiting for the leader token when PDEATHSIG, the fast path, is armed)."""
        return os.getppid() != self.supervisor_pid

    def should_continue(self) -> bool:
        if self.orphaned():
            log.warning("%s: supervisor %d is gone; stopping", self.name, self.supervisor_pid)
            self.exit_code = ExitCode.CHILD_ORPHANED
            return False
        return True

    def install_signals(self) -> None:
        """TERM drains, HUP aborts the job; QUIT finishes it; USR2/CONT pause/resume."""
        self.arm_signals(self._on_signal)
        # Ctrl-C reaches the whole process group: the supervisor decides, not the children.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        # USR1 is the supervisor's business (it kills the child running the job).
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)

    def _on_signal(self, signum: int) -> None:
        if signum in (signal.SIGTERM, signal.SIGHUP):
            # The supervisor sends TERM at the time limit; the job has then run that long.
            limit = self.limits.hard
            if limit and time.monotonic() - self._job_started >= limit:
                self.guard.abort("timeout", same_thread=True)
            elif self.signals.stop_requests:
                self.guard.abort("shutdown", same_thread=True)

    def on_job_start(self, job: Job) -> None:
        self._job_started = time.monotonic()
        self.tell(_start_line(job, self.limits.hard))

    def report(self, job: Job, outcome: Outcome) -> None:
        super().report(job, outcome)
        # A settled job's end rides along with the next start; an aborted or lost job
        # matters to the supervisor now.
        self.tell(f"e\t{job.jid}\t{outcome.value}\n", defer=outcome in _DEFERRED)

    def between_jobs(self) -> None:
        self.tell("")

    def _finish(self) -> None:
        why = self._leaving_reason()
        self.tell(status_line("x", why) if why else "")
        super()._finish()

    def _leaving_reason(self) -> str:
        """Say why the loop ended on its own (empty: stopped, orphaned or crashed)."""
        budget, taken = self.hand.budget, self.hand.taken
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
        if self._time_left() <= 0:
            return "--max-duration reached"
        return ""

    def _on_lock_lost(self, job: Job, why: str) -> None:
        # The supervisor kills us: aborting here could race it onto the next job.
        self.tell(status_line("l", job.jid, why[:500]))
        if self.orphaned():
            self.guard.abort("lock_lost")

    def on_aborted(self, job: Job, reason: str) -> bool:
        if reason not in ("timeout", "shutdown"):
            return False
        self.exit_code = ExitCode.CHILD_ABORTED  # (at a timeout, the supervisor fails the job)
        if reason == "shutdown" and self.orphaned():
            self.exit_code = ExitCode.CHILD_ORPHANED
            try:
                release_job(job.client, job.jid, self.name)
            except QlessError as exc:
                log.error("job %s: could not release (%s)", job.jid, exc)
        return True


def child_main(
    config: WorkerConfig,
    hooks: WorkerHooksProtocol,
    slot: int,
    supervisor_pid: int,
    fds: tuple[int, int, Iterable[int]],
    *,
    resume: bool,
    signal_mask: Iterable[int],
    paused: bool = False,
    pool: SharedJobPool | None = None,
    leader_token: TokenFile | None = None,
) -> NoReturn:
    """Run a freshly forked child and leave with `os._exit` (`fds`: its status pipe, its go
    pipe, the supervisor's descriptors to close). Signals arrive blocked (see the supervisor's
    fork) until its own handlers are installed; it takes no job before the go pipe says so."""
    status_fd, go_fd, inherited = fds
    code = int(ExitCode.CHILD_CRASHED)
    try:
        for fd in inherited:
            with contextlib.suppress(OSError):
                os.close(fd)
        reset_child_signals()
        armed = set_parent_death_signal(signal.SIGHUP)
        random.seed()
        hooks.after_fork_child()
        name = f"{config.name}-{slot}" if config.name else default_worker_name()
        child = ForkChild(config, hooks, name, status_fd, supervisor_pid, resume=resume,
                          pool=pool, leader_token=leader_token, death_signal=armed)
        child.install_signals()
        child.signals.paused = paused  # a child born during USR2 starts paused too
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
    """Wait for a byte or end of file on `go_fd`, a stop, the supervisor's death, or
    `bound` seconds (a stuck supervisor)."""
    deadline = time.monotonic() + bound
    try:
        while time.monotonic() < deadline and not child.signals.stopping:
            if select.select([go_fd], [], [], 0.25)[0] or child.orphaned():
                return
    finally:
        os.close(go_fd)
