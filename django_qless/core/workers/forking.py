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
from collections.abc import Iterable
from functools import partial

import redis

from django_qless.core.accessors import REQUESTS
from django_qless.core.client import Client
from django_qless.core.exceptions import QlessConnectionError, QlessError
from django_qless.core.probe import HealthFile, state_of
from django_qless.core.workers.channels import ABORT_EVENTS, ChildChannels, attempts_still_owned
from django_qless.core.workers.child import ChildProc, child_main, child_name
from django_qless.core.workers.hand import SharedJobPool, release_job
from django_qless.core.workers.leadership import TokenFile
from django_qless.core.workers.proctitle import set_title, stop_note, supervisor_title
from django_qless.core.workers.reaper import Beat, obey
from django_qless.core.workers.runner import (
    WorkerHooks,
    WorkerHooksProtocol,
    child_extra,
    stopped_failure,
)
from django_qless.core.workers.serial import beat_state
from django_qless.core.workers.shards import Deployment, ShardFollower, served_clients
from django_qless.core.workers.shutdown import ExitCode, SignalState
from django_qless.core.workers.worker_config import WorkerConfig, default_worker_name

__all__ = ["ForkingWorker"]

log = logging.getLogger("django_qless.worker")

_BLOCKED = {*SignalState.HANDLED, signal.SIGCHLD}
_STATUS_EVERY = 0.05  # seconds between two reads of the children's status pipes
_BUSY_PING, _IDLE_PING = 10.0, 30.0  # PING a quiet pubsub connection this often
# A new child takes jobs once its channel is confirmed in every shard, or after this long.
_GO_WITHIN = 5.0
# What the children are sent as a stop goes further (see SignalState): QUIT lets them finish
# their jobs, HUP makes them give the jobs back, KILL forces them.
_STAGES = {1: (None, signal.SIGQUIT), 2: ("shutdown", signal.SIGHUP),
           3: ("forced", signal.SIGKILL)}


class ForkingWorker:
    """Pre-fork N job-running children and supervise them."""

    def __init__(self, config: WorkerConfig, hooks: WorkerHooksProtocol | None = None) -> None:
        self.config = config
        self.hooks = hooks or WorkerHooks()
        self.name = config.name or default_worker_name()
        self.wanted = config.process_count
        self.signals = SignalState(term_grace=config.term_grace)
        self.client: Deployment  # (both made as it starts to run)
        self.channels: ChildChannels
        self._follower: ShardFollower | None = None
        self._releaser: Deployment | None = None  # disposes of dead children's jobs
        self.children: dict[int, ChildProc] = {}
        # Each free slot: when it may start a child, and its quick deaths in a row.
        self.free = {slot: (0.0, 0) for slot in range(self.wanted)}
        self.outcomes: Counter[str] = Counter()  # the jobs' ends the children reported
        self.unreleased = 0  # jobs a stop had to leave to their leases
        self._redis_down = False  # found unreachable while releasing: not asked again
        self.started = time.monotonic()
        self._stage = 0  # how far the stop sent to the children went (_STAGES)
        self._paused_sent = False
        self._shutdown_deadline = self._title_at = self._status_at = self._reap_at = 0.0
        # A child may have exited (SIGCHLD seen); else the children are polled once a second:
        # waitpid for each of 100 children on every wake-up (a job starting) cost the CPU.
        self._child_exited = True
        self.obey = partial(obey, name=self.name, signals=self.signals,
                            request_stop=self.signals.request_stop)
        self.reaper = config.make_reaper(self.name)
        # The supervisor's beats show its children alive (one call however many there are).
        self.reaper.beat = Beat(self.name, config.beat, partial(beat_state, self.signals),
                                self.obey, members=self._names)
        # --max-jobs for all children together: each job asked for takes a ticket from it.
        self.pool = SharedJobPool(config.max_jobs) if config.max_jobs else None
        self._leader_token: TokenFile | None = None  # (leadership.py)
        # Rewritten from the loop, never by the jobs: fresh while every child is busy.
        self.health = HealthFile(config.health_file, self.name) if config.health_file else None

    def _tickets_gone(self) -> bool:
        """Tell whether every --max-jobs ticket is taken (children leave once theirs are run)."""
        return self.pool is not None and self.pool.remaining() == 0

    def run_forever(self) -> int:
        """Supervise until stopped; return the exit code."""
        self.signals.install()
        # A Python-level SIGCHLD handler makes child deaths write to the wake pipe too.
        signal.signal(signal.SIGCHLD, self._on_sigchld)
        self.client = self.config.make_client(worker_name=self.name)
        if self.wanted > 1:  # (one child is always its own leader)
            self._leader_token = TokenFile(tempfile.mkdtemp(prefix="django-qless-"))
        self.channels = ChildChannels(served_clients(self.client, self.config.queues),
                                      _BUSY_PING, rest_after=self.config.idle_disconnect)
        if not isinstance(self.client, Client):  # queues may move between shards
            self._follower = ShardFollower(self.client, self.config.queues,
                                           self.config.queue_refresh, holders=self._names)
        self.reaper.start_beat()
        resume = self.config.resume
        try:
            while not (self.signals.stopping and not self.children):
                self._spawn_missing(resume)
                resume = False
                self._wait()
                self._reap()
                self._handle_events()
                self._let_children_go()
                self._follow()
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
        # Status lines come twice per job per child: waking for each one made the supervisor
        # burn a sizeable share of a core at a few thousand jobs/s. Read them in batches at
        # most every _STATUS_EVERY seconds (signals, deaths and pubsub still wake us at once).
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
        # Only the pipes polled readable: a job starting wakes us, and reading all
        # 100 children's pipes for it would compete with that job for the CPU.
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

    def _follow(self) -> None:
        """Hear `w:<child>` in the shards the served queues moved to (ShardFollower)."""
        try:
            if self._follower is not None:
                self.channels.follow(self._follower.clients())
        except (QlessError, redis.RedisError, OSError) as exc:
            log.warning("could not look up the queues' shards (%s)", exc)

    def _handle_events(self) -> None:
        """Obey console requests; kill children whose job was taken (heard, or after a gap)."""
        events = self.channels.poll()  # (reads the confirmations take_missed waits for)
        missed = self.channels.take_missed()
        if missed or events:
            self._read_status(self.children.values())  # so child.jid is the current job
        if missed:
            self._recheck_running_jobs()
        by_name = {c.name: c for c in self.children.values()}
        for worker, payload in events:
            child, event, jid = by_name.get(worker), payload.get("event"), payload.get("jid")
            if child is None:
                continue
            if event in REQUESTS:
                self.obey(str(event))  # (a child's name stands for its whole worker)
            elif event in ABORT_EVENTS and isinstance(jid, str) and jid == child.jid:
                log.warning("child %s: %s for job %s; killing it", child.name, event, jid,
                            extra=child_extra(child))
                child.kill("lock_lost", signal.SIGKILL)
            elif event in ABORT_EVENTS and isinstance(jid, str):
                # Popped but not reported yet, or held ahead: Redis is asked at its start.
                child.aborted.note(jid)
        if any(c.unsure for c in self.children.values()) and not self.channels.confirming():
            self._recheck_running_jobs(only_unsure=True)

    def _recheck_running_jobs(self, *, only_unsure: bool = False) -> None:
        """After a pubsub gap, kill children whose job is no longer theirs in Redis
        (`only_unsure`: only those whose job started while its events might be missed)."""
        if self.channels.resting:
            return  # (re-checked once a job wakes the channels and Redis confirms them)
        by_shard: dict[Client, list[ChildProc]] = {}
        for c in self.children.values():
            if c.unsure or not only_unsure:
                c.unsure = False
                if c.jid is not None and c.kill_reason is None:
                    by_shard.setdefault(self.client.for_queue(c.queue or ""), []).append(c)
        lost: list[tuple[ChildProc, str]] = []
        try:
            for shard, running in by_shard.items():
                owned = attempts_still_owned(shard, [(c.jid or "", c.name, c.token or "")
                                                     for c in running])
                lost += [(c, c.jid or "") for c, mine in zip(running, owned, strict=True)
                         if not mine]
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
        if self.signals.stopping or self._tickets_gone():
            return
        now = time.monotonic()
        for slot, (ready_at, failures) in sorted(self.free.items()):
            if ready_at <= now:
                self._spawn(slot, failures, resume)

    def _spawn(self, slot: int, failures: int, resume: bool) -> None:
        self.hooks.before_fork()
        status_read, status_write = os.pipe()
        go_read, go_write = os.pipe()
        wake = self.signals.wake_pipe
        inherited = [status_read, go_write, wake.read_fd, wake.write_fd,
                     *(fd for c in self.children.values() for fd in (c.status_fd, c.go_fd))]
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
                child_main(self.config, self.hooks, slot, supervisor_pid,
                           (status_write, go_read, [fd for fd in inherited if fd >= 0]),
                           resume=resume, signal_mask=mask, paused=self.signals.paused,
                           pool=self.pool, leader_token=self._leader_token)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(status_write)
        os.close(go_read)
        os.set_blocking(status_read, False)
        name = child_name(self.config, slot, pid)
        self.children[pid] = ChildProc(slot, pid, name, status_read, go_write, failures)
        del self.free[slot]
        self.channels.add(name)
        self.hooks.after_fork_parent(pid)
        log.info("started child %s (pid %d, slot %d)", name, pid, slot)

    def _let_children_go(self) -> None:
        """Let each new child take jobs once Redis has confirmed its channel everywhere: a
        job it took before could be canceled unheard (noticed only at its heartbeat)."""
        for child in self.children.values():
            if child.go_fd < 0:
                continue
            if not self.channels.listening(child.name):
                if time.monotonic() - child.started < _GO_WITHIN:
                    continue
                log.warning("child %s: its channel is not confirmed after %gs; letting it "
                            "take jobs anyway", child.name, _GO_WITHIN)
            child.let_go()

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
        # A child that gave its job back itself: its term grace ran out, or a HUP.
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
        uptime = time.monotonic() - child.started
        quick = code != 0 and reason is None and uptime < self.config.respawn_min_uptime
        failures = child.failures + 1 if quick else 0
        delay = min(0.1 * 2.0 ** failures, self.config.respawn_max_backoff) if quick else 0.0
        if quick:
            log.warning("child slot %d dies quickly; respawning in %.1fs", child.slot, delay)
        self.free[child.slot] = (time.monotonic() + delay, failures)

    def _dispose(self, child: ChildProc, reason: str | None, code: int) -> None:
        """Release the jobs a dead child held ahead (at a stop, the running one too), fail
        the one its time limit or USR1 killed; a crash or a lost lock leaves it to its lease."""
        stop = reason in ("shutdown", "forced")
        if stop and self._redis_down:
            self.unreleased += 1
            return
        try:
            client = self._release_client()
            if reason in ("timeout", "killed") and child.jid:
                self._fail_running(child, client.for_queue(child.queue or ""), reason)
            running = client.for_queue(child.queue or "") if stop and child.jid else None
            for shard in served_clients(client, self.config.queues):
                self._release_held(child, shard, running=shard is running)
                if stop or not child.jid or code == 0:
                    shard.workers.deregister(child.name)
        except QlessError as exc:
            self.unreleased += 1 if stop else 0
            if stop and isinstance(exc, QlessConnectionError):
                # Redis is unreachable or silent: don't wait a timeout per job; the leases
                # expire and the jobs come back to another worker anyway.
                log.error("could not release child %s's jobs (%s); their leases will expire",
                          child.name, exc)
                self._redis_down = True
            else:
                log.error("could not dispose of child %s's job: %s", child.name, exc)

    def _fail_running(self, child: ChildProc, shard: Client, reason: str) -> None:
        """Fail the job a child killed at its time limit or by USR1 ran (if still its own)."""
        assert child.jid is not None
        reply = shard.call_json("get", child.jid)
        if reply and reply.get("state") == "running" and reply.get("worker") == child.name:
            group, text = stopped_failure(reason, child.limit)
            shard.call("fail", child.jid, child.name, group,
                       f"{text} on worker {child.name} (pid {child.pid})")
            self.outcomes["failed"] += 1

    def _release_held(self, child: ChildProc, shard: Client, *, running: bool) -> None:
        """Release the jobs the child held in `shard` (`running`: the one it ran too)."""
        jids = set(shard.workers[child.name]["jobs"]) - {child.jid}
        for jid in sorted(jids | ({child.jid} if running and child.jid else set())):
            try:
                # (a job held ahead never started: no retry spent, its ticket free again)
                if release_job(shard, jid, child.name) and self.pool and jid != child.jid:
                    self.pool.give_back(1)
            except QlessConnectionError:
                raise
            except QlessError as exc:
                log.error("job %s: could not release (%s); its lease will expire", jid, exc)
                self.unreleased += 1

    def _release_client(self) -> Deployment:
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
        if self._tickets_gone() and not self.children:
            log.info("--max-jobs reached (%d in all): stopping", self.config.max_jobs)
            self.signals.request_stop(graceful=True)
        elif self.config.max_duration and now - self.started >= self.config.max_duration:
            log.info("--max-duration reached (%gs): stopping gracefully", self.config.max_duration)
            self.signals.request_stop(graceful=True)

    def _reap_leases(self) -> None:
        """Beat and recover expired leases (reaper.py); idle, ping less and close the pubsub
        connections after --idle-disconnect (an idle worker costs Redis next to nothing)."""
        idle = not any(child.jid for child in self.children.values())
        self.channels.health_check_interval = _IDLE_PING if idle else _BUSY_PING
        self.channels.settle(busy=not idle)
        # (stopping: beats only, "draining" while the children finish their jobs)
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
        if self._leader_token is not None:
            self._leader_token.close()
            if self._leader_token.path:  # (left where /proc cannot reopen it)
                shutil.rmtree(os.path.dirname(self._leader_token.path), ignore_errors=True)
        if self.health is not None:
            self.health.remove()
