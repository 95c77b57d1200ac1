"""The idle-leader token: only one idle child of a forking worker waits on the engine.

The token is an exclusive `flock` on a file the supervisor opens before forking; each child
reopens it (its own open file description), and the kernel drops a lock when its holder dies,
even by SIGKILL. A leader gives the token up as its job starts, after `hold` seconds
(`--leader-hold`) unless a wake-up comes first, so short jobs stay on one warm child.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence

from django_qless.core.engine.pubsub import block_async_signals, poll_readable

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


def open_leadership(token: TokenFile, hold: float = 0.0) -> Leadership | None:
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
    return Leadership(fd, hold)


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
    """This child's claim on the idle-leader token (job thread API; one helper thread).

    The blocking `flock` runs in the helper (signals blocked), which also unlocks a token given
    up at a job's start once its hold is over; a token that comes when no longer wanted is
    passed straight on.
    """

    def __init__(self, fd: int, hold: float = 0.0) -> None:
        self._fd = fd  # flock locks are per open file description, not per process
        self._hold = hold
        self._watch: tuple[int, ...] = ()  # sockets whose messages end a hold
        self.notify_fd, self._notify_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        # The helper sleeps in a read of this pipe: a write costs the job thread less at a
        # job's start than a Condition's notify.
        self._work_r, self._work_w = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self._work_w, False)
        self._lock = threading.Lock()  # guards the state below
        self._held = self._wanted = False
        self._locking = False  # the helper is inside flock(): the job thread must not call it
        self._letting_go = False  # released by the job thread, still to unlock in the helper
        self._releases = 0  # a hold belongs to the release it started for
        self._thread: threading.Thread | None = None
        # A job that forks must not take our lock's description along: a grandchild
        # outliving us would keep the token held.
        os.register_at_fork(after_in_child=lambda: _close(
            self._fd, self.notify_fd, self._notify_w, self._work_r, self._work_w))

    @property
    def held(self) -> bool:
        """Tell whether this child is the leader now."""
        with self._lock:
            return self._held

    def try_take(self) -> bool:
        """Take the token if it is free (no wait); return whether this child holds it."""
        if self._held:  # (only this thread sets it false)
            return True
        with self._lock:
            if self._letting_go:  # given up, not unlocked yet: still ours
                self._letting_go = False
                self._held = True
            if self._held or self._locking:
                return self._held
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                return False
            self._held = True
            self._stamp()
            self._start_helper()  # now, while idle: a later release(soon=True) needs it
            return True

    def want(self, wanted: bool) -> None:
        """Start (True) or stop (False) queueing for the token in the helper thread."""
        with self._lock:
            self._wanted = wanted
            if wanted:
                try:
                    while os.read(self.notify_fd, 64):
                        pass
                except BlockingIOError:
                    pass
                self._start_helper()
                _poke(self._work_w)

    def release(
        self, *, soon: bool = False, watch: Callable[[], Sequence[int]] | None = None
    ) -> None:
        """Give the token up; `soon`: the helper unlocks it after the hold, or when a socket
        `watch()` names becomes readable (polled only)."""
        with self._lock:
            if not self._held:
                return
            self._held = False
            self._letting_go = soon and self._thread is not None
            if self._letting_go:
                self._releases += 1
                self._watch = tuple(watch()) if watch is not None else ()
                _poke(self._work_w)
            else:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

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
                self._locking = self._wanted = False  # the job thread's next want() retries
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
        """Unlock a token given up at a job's start after the hold, unless taken back."""
        with self._lock:
            release, watch = self._releases, self._watch
        if self._hold > 0:
            poll_readable(list(watch), self._hold)
        with self._lock:
            # Taken back and given up again meanwhile: that later job's hold starts afresh,
            # and a message that ended this poll (its own hand-off) must not cut it short.
            if self._letting_go and self._releases == release:
                self._letting_go = False
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def steady_for(self) -> float:
        """Return how long the token has been with its leader (0 if it never changed hands)."""
        try:
            data = os.pread(self._fd, _STAMP.size, 0)
        except OSError:
            return 0.0
        if len(data) < _STAMP.size:
            return 0.0
        return max(0.0, time.monotonic() - float(_STAMP.unpack(data)[0]))

    def _stamp(self) -> None:
        try:
            os.pwrite(self._fd, _STAMP.pack(time.monotonic()), 0)
        except OSError as exc:
            log.debug("could not note the token's change of hands: %s", exc)
