"""The idle turn: only one idle child of a forking worker (the idle leader) waits on Redis.

The token is an exclusive `flock` on a file the supervisor opens before forking; each child
reopens it (its own open file description), and the kernel drops a lock when its holder dies,
even by SIGKILL.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django_qless.core.engine.pubsub import block_async_signals, poll_readable

if TYPE_CHECKING:
    from django_qless.core.workers.wakeup import WakeWaiter

__all__ = ["Leadership", "TokenFile", "open_leadership"]

log = logging.getLogger("django_qless.worker")

# When the token last changed hands (CLOCK_MONOTONIC, shared by the machine's processes).
_STAMP = struct.Struct("d")


class TokenFile:
    """The token's file, created and kept open by the supervisor before it forks."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "leader")
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        if os.path.exists(f"/proc/self/fd/{self.fd}"):
            # Children reopen it through the descriptor: nothing is left behind by a SIGKILL.
            os.unlink(self.path)
            os.rmdir(directory)
            self.path = ""

    def close(self) -> None:
        """Close the supervisor's descriptor (leaving)."""
        os.close(self.fd)


def open_leadership(token: TokenFile, waiter: WakeWaiter, hold: float = 0.0,
                    quiet: float = 0.0) -> Leadership | None:
    """Open this child's own claim on `token`; None if it cannot (it then always registers)."""
    try:
        try:
            fd = os.open(f"/proc/self/fd/{token.fd}", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            if not token.path:
                raise
            fd = os.open(token.path, os.O_RDWR | os.O_CLOEXEC)  # no /proc (not Linux)
    except OSError as exc:
        log.warning("idle-leader token unavailable (%s): this child registers when idle", exc)
        return None
    finally:
        _close(token.fd)  # the supervisor's description is not ours to keep
    return Leadership(fd, waiter, hold, quiet)


def _poke(fd: int) -> None:
    try:
        os.write(fd, b"!")
    except BlockingIOError:
        pass  # readable already


def _close(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class Leadership:
    """This child's idle turn: its claim on the token, the wait for it, and the disconnect.

    The blocking `flock` runs in a helper thread (signals blocked), which also unlocks a token
    given up at a job's start once its `hold` is over or a wake-up comes; a token that comes
    when no longer wanted is passed straight on.
    """

    def __init__(self, fd: int, waiter: WakeWaiter, hold: float = 0.0,
                 quiet: float = 0.0) -> None:
        self._fd = fd  # flock locks are per open file description, not per process
        self.waiter = waiter
        self._hold, self._quiet = hold, quiet
        self._watch: list[int] = []  # sockets whose messages end a hold
        self._notify_r, self._notify_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        # The helper sleeps in a read of this pipe: a write costs the job thread less at a
        # job's start than a Condition's notify.
        self._work_r, self._work_w = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self._work_w, False)
        self._lock = threading.Lock()  # guards the token's state below
        self._held = self._wanted = False
        self._locking = False  # the helper is inside flock(): the job thread must not call it
        self._letting_go = False  # released by the job thread, still to unlock in the helper
        self._releases = 0  # a hold belongs to the release it started for
        self._thread: threading.Thread | None = None
        self._listening = False  # subscribed once while waiting (job thread only, as below)
        self._closed = False  # connections closed until this child leads
        self._cold = False  # closed since the last reserve: reserve once before subscribing
        # A job that forks must not take our lock's description along: a grandchild
        # outliving us would keep the token held.
        os.register_at_fork(after_in_child=lambda: _close(
            self._fd, self._notify_r, self._notify_w, self._work_r, self._work_w))

    @property
    def held(self) -> bool:
        """Tell whether this child is the leader now."""
        with self._lock:
            return self._held

    def try_take(self) -> bool:
        """Take the token if it is free (no wait); return whether this child holds it."""
        if self._held:  # (only this thread sets it false)
            self._closed = False
            return True
        with self._lock:
            if self._letting_go:  # given up, not unlocked yet: still ours
                self._letting_go = False
                self._held = True
            if not self._held and not self._locking:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise
                    return False
                self._held = True
                self._stamp()
                self._start_helper()  # now, while idle: a later release(soon=True) needs it
            if self._held:
                self._closed = False
            return self._held

    def await_turn(self, seconds: float, keep_waiting: Callable[[], bool],
                   check_every: float) -> bool:
        """Wait, sending Redis nothing, for the token or a hand-off; False if a signal,
        `keep_waiting()` (asked every `check_every` s) or the end of `seconds` came first."""
        waiter = self.waiter
        if not self._listening and not self._closed:
            if self._until_quiet() <= 0:
                self._disconnect()  # (a new child of an idle worker: nothing to listen for)
            else:  # once: the first turn as leader then needs no subscribe round trip
                self._listening = True
                waiter.ensure_subscribed()
        self._want(True)
        try:
            deadline = time.monotonic() + seconds
            while not self.held and not waiter.handed:
                step = min(deadline - time.monotonic(), check_every)
                if step <= 0:
                    return False
                if not self._closed:
                    quiet_in = self._until_quiet()
                    if quiet_in <= 0:
                        self._disconnect()
                    else:
                        step = min(step, quiet_in)
                if waiter.wait_quietly(self._notify_r, step) or not keep_waiting():
                    return False  # a signal, or the supervisor died: the loop acts on it
            self._closed = False
            return True
        finally:
            self._want(False)  # the token, if it comes now, goes on to the next child

    def went_cold(self) -> bool:
        """Tell (once) whether the connections were closed since the last reserve."""
        cold, self._cold = self._cold, False
        return cold

    def release(self, *, soon: bool = False) -> None:
        """Give the token up; `soon` (a job starts): the helper unlocks it after the hold, or
        when a wake-up socket becomes readable (polled only)."""
        with self._lock:
            if not self._held:
                return
            self._held = False
            self._letting_go = soon and self._thread is not None
            if self._letting_go:
                self._releases += 1
                self._watch = self.waiter.sockets()
                _poke(self._work_w)
            else:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _until_quiet(self) -> float:
        """Return the seconds until the token stayed `quiet` seconds with one leader."""
        if not self._quiet:
            return float("inf")
        try:
            data = os.pread(self._fd, _STAMP.size, 0)
        except OSError:
            data = b""
        if len(data) < _STAMP.size:  # (it never changed hands)
            return self._quiet
        return self._quiet - max(0.0, time.monotonic() - float(_STAMP.unpack(data)[0]))

    def _disconnect(self) -> None:
        """Close this child's connections until it leads (it has nothing to say or hear)."""
        # An idle connection costs Redis CPU (its cron visits each), but reopening one costs
        # minutes of that: only a child the token stayed away from for `quiet` seconds.
        self._closed = self._cold = True
        self._listening = False  # subscribe again at the start of the next wait
        self.waiter.disconnect()
        self.waiter.routes.deployment.disconnect()
        log.debug("leader unchanged for %gs: connections closed until this child leads",
                  self._quiet)

    def _want(self, wanted: bool) -> None:
        """Start (True) or stop (False) queueing for the token in the helper thread."""
        with self._lock:
            self._wanted = wanted
            if wanted:
                try:
                    while os.read(self._notify_r, 64):
                        pass
                except BlockingIOError:
                    pass
                self._start_helper()
                _poke(self._work_w)

    def _start_helper(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._queue, name="qless-leader",
                                            daemon=True)
            self._thread.start()

    def _queue(self) -> None:
        """Helper thread: wait for the lock whenever the job thread wants it."""
        block_async_signals()
        while True:
            with self._lock:
                letting_go = self._letting_go
                self._locking = not letting_go and self._wanted and not self._held
            if letting_go:
                self._let_go()
            elif self._locking:
                self._lock_when_free()
            else:
                try:
                    os.read(self._work_r, 64)  # until the job thread changes the state
                except InterruptedError:
                    pass

    def _lock_when_free(self) -> None:
        """Helper thread: block in flock; keep the token if still wanted, else pass it on."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except OSError as exc:
            log.error("waiting for the idle-leader token failed: %s", exc)
            with self._lock:
                self._locking = self._wanted = False  # the job thread's next wait retries
            _poke(self._notify_w)
            return
        with self._lock:
            self._locking = False
            if not self._wanted:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                return
            self._held = True
            self._wanted = False
            self._stamp()
        _poke(self._notify_w)

    def _let_go(self) -> None:
        """Helper thread: unlock a token given up at a job's start after its hold."""
        with self._lock:
            release, watch = self._releases, self._watch
        if self._hold > 0:
            poll_readable(watch, self._hold)
        with self._lock:
            # Taken back and given up again meanwhile: that later job's hold starts afresh,
            # and a message that ended this poll (its own hand-off) must not cut it short.
            if self._letting_go and self._releases == release:
                self._letting_go = False
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _stamp(self) -> None:
        try:
            os.pwrite(self._fd, _STAMP.pack(time.monotonic()), 0)
        except OSError as exc:
            log.debug("could not note the token's change of hands: %s", exc)
