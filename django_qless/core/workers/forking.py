"""`ForkingWorker`: a supervisor that pre-forks N job-running children and keeps them alive.

Single-threaded, it never runs jobs: one poll() over the signal pipe, the children's status
pipes and the `w:<child>` sockets, then, in order: spawn, reap and dispose, kill children
whose job was taken, act on signals (shutdown.py) and time limits, beat and reap leases.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shutil
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import redis

from django_qless.core.accessors import REQUESTS
from django_qless.core.exceptions import QlessConnectionError, QlessError
from django_qless.core.probe import HealthFile, state_of
from django_qless.core.types import QlessClient
from django_qless.core.worker_options import WorkerConfig, default_worker_name
from django_qless.core.workers.channels import ABORT_EVENTS, ChildChannels
from django_qless.core.workers.child import ChildProc, spawn_child, taken_away
from django_qless.core.workers.hand import SharedJobPool
from django_qless.core.workers.heartbeat import Beat
from django_qless.core.workers.leadership import TokenFile
from django_qless.core.workers.proctitle import set_title, stop_note, supervisor_title
from django_qless.core.workers.runner import WorkerHooks, child_extra
from django_qless.core.workers.shards import followed_shards, served_clients
from django_qless.core.workers.shutdown import ExitCode, SignalState

if TYPE_CHECKING:
    from django_qless.core.client import Client

__all__ = ["ForkingWorker"]

log = logging.getLogger("django_qless.worker")

_STATUS_EVERY = 0.05  # seconds between two reads of the children's status pipes
_BUSY_PING, _IDLE_PING = 10.0, 30.0  # PING a quiet pubsub connection this often
# Sent to the children as a stop goes further: QUIT finishes jobs, HUP gives them back, KILL.
_STAGES = {1: (None, signal.SIGQUIT), 2: ("shutdown", signal.SIGHUP), 3: ("forced", signal.SIGKILL)}


class ForkingWorker:
    """Pre-fork N job-running children and supervise them."""

    def __init__(self, config: WorkerConfig, hooks: WorkerHooks | None = None) -> None:
        self.config = config
        self.hooks = hooks or WorkerHooks()
        self.name = config.name or default_worker_name()
        self.wanted = config.process_count
        self.signals = SignalState(term_grace=config.term_grace)
        self.client: QlessClient  # (these three made as it starts to run)
        self.channels: ChildChannels
        self._follow: Callable[[], list[Client]]
        self._releaser: QlessClient | None = None  # disposes of dead children's jobs
        self.children: dict[int, ChildProc] = {}
        # Each free slot: when it may start a child, and its quick deaths in a row.
        self.free = {slot: (0.0, 0) for slot in range(self.wanted)}
        self.outcomes: Counter[str] = Counter()  # the jobs' ends the children reported
        self.unreleased = 0  # jobs a stop had to leave to their leases
        self._redis_down = False  # found unreachable while releasing: not asked again
        self.started = time.monotonic()
        self._stage, self._paused_sent = 0, False  # what the children were sent (_STAGES)
        self._shutdown_deadline = self._title_at = self._status_at = self._reap_at = 0.0
        # SIGCHLD seen (else waitpid for each child once a second, not on every wake-up).
        self._child_exited = True
        self.reaper = config.make_reaper(self.name)
        self.beat = self.reaper.beat = Beat(self.name, config.beat, self.signals,
                                            self.signals.request_stop, members=self._names)
        self.pool = SharedJobPool(config.max_jobs) if config.max_jobs else None  # (for all)
        self.leader_token: TokenFile | None = None  # (leadership.py)
        self.health = HealthFile(config.health_file, self.name) if config.health_file else None

    def run_forever(self) -> int:
        """Supervise until stopped; return the exit code."""
        self.signals.install()
        signal.signal(signal.SIGCHLD, self._on_sigchld)  # (a Python handler: it wakes us too)
        self.client = self.config.make_client(worker_name=self.name)
        if self.wanted > 1:  # (one child is always its own leader)
            self.leader_token = TokenFile(tempfile.mkdtemp(prefix="django-qless-"))
        self.channels = ChildChannels(served_clients(self.client, self.config.queues),
                                      _BUSY_PING, rest_after=self.config.idle_disconnect)
        self._follow = followed_shards(self.client, self.config.queues,
                                       self.config.queue_refresh, holders=self._names)
        self.reaper.reap(beat_only=True)
        resume = self.config.resume
        try:
            while not (self.signals.stopping and not self.children):
                self._spawn_missing(resume)
                resume = False
                self._wait()
                self._reap()
                self._handle_events()
                self._let_children_go()
                self._act_on_signals()
                self._enforce_limits()
                self._reap_leases()
                self._show_state()
        finally:
            self._cleanup()
        if self._stage == 3:
            return ExitCode.FORCED
        return ExitCode.UNRELEASED if self.unreleased else ExitCode.OK

    def _wait(self) -> None:
        """Block on the wake pipe, the pubsub sockets and the status pipes (at most 0.25 s)."""
        # Status lines (two a job a child) are read in batches: a wake-up for each burnt CPU.
        status_wait = self._status_at + _STATUS_EVERY - time.monotonic()
        by_fd = {c.status_fd: c for c in self.children.values()} if status_wait <= 0 else {}
        timeout = 0.0 if self.channels.buffered() else min(0.25, self.channels.wake_in())
        if status_wait > 0 and self.children:
            timeout = min(timeout, status_wait)
        poller = select.poll()
        for fd in (self.signals.wake_pipe.read_fd, *self.channels.filenos(), *by_fd):
            poller.register(fd, select.POLLIN)
        ready = [fd for fd, _ in poller.poll(timeout * 1000)]
        if self.signals.wake_pipe.read_fd in ready:
            self.signals.wake_pipe.drain()
        # (only those polled readable: reading 100 pipes would compete with the job started)
        readable = [by_fd[fd] for fd in ready if fd in by_fd]
        if readable:
            self._read_status(readable)

    def _read_status(self, children: Iterable[ChildProc]) -> None:
        """Read the status lines the children wrote so far."""
        self._status_at = time.monotonic()
        unsure = self.channels.unsure()  # (a job starting now may have been taken unheard)
        for child in list(children):
            child.read_status(unsure, self.outcomes)

    def _names(self) -> list[str]:
        """Return the names of the live children (whose jobs keep a shard followed)."""
        return sorted(self.channels.names)

    def _handle_events(self) -> None:
        """Obey console requests, kill children whose job was taken, follow the queues."""
        events = self.channels.poll()  # (reads the confirmations take_missed waits for)
        missed = self.channels.take_missed()
        if missed or events:
            self._read_status(self.children.values())
        if missed:
            self._recheck_running_jobs()
        by_name = {c.name: c for c in self.children.values()}
        for worker, payload in events:
            child, event, jid = by_name.get(worker), payload.get("event"), payload.get("jid")
            if child is None:
                continue
            if event in REQUESTS:
                self.beat.obey(str(event))  # (a child's name stands for its whole worker)
            elif event in ABORT_EVENTS and isinstance(jid, str) and jid == child.jid:
                log.warning("child %s: %s for job %s; killing it", child.name, event, jid,
                            extra=child_extra(child))
                child.kill("lock_lost", signal.SIGKILL)
            elif event in ABORT_EVENTS and isinstance(jid, str):
                child.aborted.note(jid)  # not reported started: Redis is asked at its start
        if any(c.unsure for c in self.children.values()) and not self.channels.confirming():
            self._recheck_running_jobs(only_unsure=True)
        try:  # (hear `w:<child>` in the shards the served queues moved to)
            self.channels.follow(self._follow())
        except (QlessError, redis.RedisError, OSError) as exc:
            log.warning("could not look up the queues' shards (%s)", exc)

    def _recheck_running_jobs(self, *, only_unsure: bool = False) -> None:
        """After a pubsub gap, kill children whose job is no longer theirs in Redis
        (`only_unsure`: only those whose job started while its events might be missed)."""
        if self.channels.resting:
            return  # (re-checked once a job wakes the channels and Redis confirms them)
        checked = [c for c in self.children.values() if c.unsure or not only_unsure]
        for c in checked:
            c.unsure = False
        try:
            lost = taken_away(self.client, checked)
        except QlessError as exc:
            log.warning("could not re-check the running jobs: %s", exc)
            return
        if lost:
            self._read_status(self.children.values())  # a child may have moved on since
        for child, jid in lost:
            if child.jid == jid and child.kill_reason is None and child.pid in self.children:
                log.warning("child %s: job %s is no longer its own in Redis (taken away "
                            "unheard, or before its start was reported); killing it",
                            child.name, jid, extra=child_extra(child))
                child.kill("lock_lost", signal.SIGKILL)

    def _spawn_missing(self, resume: bool) -> None:
        if self.signals.stopping or (self.pool and not self.pool.remaining()):
            return
        now = time.monotonic()
        for slot, (ready_at, failures) in sorted(self.free.items()):
            if ready_at > now:
                continue
            self.hooks.before_fork()
            child = spawn_child(self, slot, failures, resume)
            self.children[child.pid] = child
            del self.free[slot]
            self.channels.add(child.name)
            self.hooks.after_fork_parent(child.pid)
            log.info("started child %s (pid %d, slot %d)", child.name, child.pid, slot)

    def _let_children_go(self) -> None:
        """Let each new child take jobs once Redis has confirmed its channel everywhere."""
        for child in self.children.values():
            if child.go_fd >= 0:
                child.let_go(confirmed=self.channels.listening(child.name))

    def _on_sigchld(self, signum: int, frame: object) -> None:
        self._child_exited = True

    def _reap(self, *, always: bool = False) -> None:
        now = time.monotonic()
        if not (always or self._child_exited or now >= self._reap_at):
            return
        self._child_exited = False  # (before the scan: a death during it is seen next time)
        self._reap_at = now + 1.0
        # Only our own children: the embedding program may have others (an event bridge).
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                self._after_death(self.children.pop(pid), os.waitstatus_to_exitcode(status))

    def _after_death(self, child: ChildProc, code: int) -> None:
        """Log a dead child, dispose of its jobs, and plan its replacement (backing off)."""
        child.read_status(self.channels.unsure(), self.outcomes)
        os.close(child.status_fd)
        child.let_go()
        self.channels.remove(child.name)
        reason = child.kill_reason or ("shutdown" if code == ExitCode.CHILD_ABORTED else None)
        if code == 0 and reason is None:
            why = child.left or ("stopped as asked" if self.signals.stopping else "left")
            log.info("child %s (pid %d) finished: %s", child.name, child.pid, why)
        else:
            level = logging.INFO if code == 0 or reason else logging.ERROR
            log.log(level, "child %s (pid %d) exited with %d (%s)%s", child.name, child.pid,
                    code, reason or "unexpected", f", job {child.jid}" if child.jid else "",
                    extra=child_extra(child) if child.jid else None)
        self._dispose(child, reason, code)
        delay = child.backoff(code != 0 and reason is None, self.config.respawn_min_uptime,
                              self.config.respawn_max_backoff)
        if child.failures:
            log.warning("child slot %d dies quickly; respawning in %.1fs", child.slot, delay)
        self.free[child.slot] = (time.monotonic() + delay, child.failures)

    def _dispose(self, child: ChildProc, reason: str | None, code: int) -> None:
        """Release the jobs a dead child held ahead (at a stop, the running one too), fail
        the one its time limit or USR1 killed; a crash or a lost lock leaves it to its lease."""
        stop = reason in ("shutdown", "forced")
        if stop and self._redis_down:
            self.unreleased += 1
            return
        try:
            client = self._release_client()
            if reason in ("timeout", "killed") and child.jid and \
                    child.fail_running(client.for_queue(child.queue or ""), reason):
                self.outcomes["failed"] += 1
            running = client.for_queue(child.queue or "") if stop and child.jid else None
            for shard in served_clients(client, self.config.queues):
                self.unreleased += child.release_held(shard, shard is running, self.pool)
                if stop or not child.jid or code == 0:
                    shard.workers.deregister(child.name)
        except QlessError as exc:
            self.unreleased += 1 if stop else 0
            if stop and isinstance(exc, QlessConnectionError):  # (no timeout per job)
                log.error("could not release child %s's jobs (%s); their leases will expire",
                          child.name, exc)
                self._redis_down = True
            else:
                log.error("could not dispose of child %s's job: %s", child.name, exc)

    def _release_client(self) -> QlessClient:
        """Return the disposing client: a short timeout, so a silent Redis cannot hold a stop."""
        if self._releaser is None:
            timeout = min(5.0, max(0.5, self.config.shutdown_grace / 2))
            self._releaser = self.config.make_client(worker_name=self.name,
                                                     socket_timeout=timeout)
        return self._releaser

    def _signal_all(self, reason: str | None, signum: int) -> None:
        for child in self.children.values():
            child.kill(reason, signum)

    def _act_on_signals(self) -> None:
        """Stop the children as far as the stop requests go (_STAGES), kill the job on USR1,
        pause or resume them."""
        sig = self.signals
        if sig.drain_over() and self.children:
            log.warning("the %gs term grace is over: giving the running jobs back",
                        self.config.term_grace)
        stage = min(sig.stop_requests, 2) + 1 if sig.stop_requests else int(sig.graceful)
        if stage > self._stage:
            self._stage = stage
            if stage == 1:
                grace = f" for up to {self.config.term_grace:g}s (TERM)"
                log.info("graceful stop: finishing running jobs%s",
                         "" if sig.drain_deadline is None else grace)
            elif stage == 2:
                log.info("stop requested: aborting and releasing running jobs")
                self._shutdown_deadline = time.monotonic() + self.config.shutdown_grace
            else:
                log.warning("another stop request: killing children now")
            self._signal_all(*_STAGES[stage])
        if sig.kill_current:
            sig.kill_current = False
            self._read_status(self.children.values())  # (read in batches: catch up)
            for child in self.children.values():
                if child.jid is not None:
                    log.warning("USR1: killing child %s running %s", child.name, child.jid)
                    child.kill("killed", signal.SIGKILL)
        if sig.dump_stacks:
            sig.dump_stacks = False
            log.warning("USR2: paused; children dump their stacks to stderr; CONT resumes")
        if sig.paused != self._paused_sent:
            self._paused_sent = sig.paused
            self._signal_all(None, signal.SIGUSR2 if sig.paused else signal.SIGCONT)

    def _enforce_limits(self) -> None:
        """Kill children past the stop's grace or their job's time limit; stop at --max-jobs
        or --max-duration."""
        now = time.monotonic()
        if self._stage == 2 and now >= self._shutdown_deadline:
            for child in self.children.values():
                log.warning("child %s did not stop in time; killing it", child.name)
                child.kill("forced", signal.SIGKILL)
        # An --exec child gives its command --kill-grace to stop after TERM, then kills it.
        grace = self.config.kill_grace + (1.0 if self.config.exec_command else 0.0)
        for child in self.children.values():
            if child.kill_reason == "timeout" and now - child.term_sent >= grace:
                child.kill("timeout", signal.SIGKILL)
            elif (child.limit and child.jid and child.kill_reason is None
                  and now - child.job_started >= child.limit):
                log.warning("job %s on %s exceeded its time limit of %gs; stopping it",
                            child.jid, child.name, child.limit, extra=child_extra(child))
                child.kill("timeout", signal.SIGTERM)
        if self.signals.stopping:
            return
        if self.pool and not self.pool.remaining() and not self.children:
            log.info("--max-jobs reached (%d in all): stopping", self.config.max_jobs)
            self.signals.request_stop(graceful=True)
        elif self.config.max_duration and now - self.started >= self.config.max_duration:
            log.info("--max-duration reached (%gs): stopping gracefully", self.config.max_duration)
            self.signals.request_stop(graceful=True)

    def _reap_leases(self) -> None:
        """Beat and recover expired leases (core/upkeep.py); idle, ping less and close the pubsub
        connections after --idle-disconnect (an idle worker costs Redis next to nothing)."""
        idle = not any(child.jid for child in self.children.values())
        self.channels.health_check_interval = _IDLE_PING if idle else _BUSY_PING
        self.channels.settle(busy=not idle)
        self.reaper.maybe_reap(idle=idle, reap=not self.signals.stopping)

    def _show_state(self) -> None:
        """Write the health file, and the title every half second."""
        if self.health is not None:
            self.health.beat(state_of(self.signals, serving=bool(self.children)))
        now = time.monotonic()
        if now - self._title_at >= 0.5:
            self._title_at = now
            done = self.outcomes["completed"] + self.outcomes["settled"]
            set_title(supervisor_title(self.config.queues, len(self.children), self.wanted,
                                       self.signals.paused, done, self.outcomes["failed"],
                                       stop_note(self.signals)))

    def _cleanup(self) -> None:
        """Kill what is left, deregister (unless Redis was found down), let go of everything."""
        self._signal_all("forced", signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while self.children and time.monotonic() < deadline:
            self._reap(always=True)
            time.sleep(0.01)
        self.channels.close()
        self.reaper.close()
        if not self._redis_down:
            with contextlib.suppress(QlessError, redis.RedisError):
                for shard in served_clients(self._release_client(), self.config.queues):
                    shard.workers.deregister(self.name)
        for client in (self.client, self._releaser):
            if client is not None:
                client.close()
        self.signals.uninstall()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if self.leader_token is not None:
            self.leader_token.close()
            if self.leader_token.path:  # (left where /proc cannot reopen it)
                shutil.rmtree(os.path.dirname(self.leader_token.path), ignore_errors=True)
        if self.health is not None:
            self.health.remove()
