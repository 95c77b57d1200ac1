"""The idle-leader token: only one idle child of a forking worker waits on the engine.

Only the holder of the token (the leader) registers as idle, listens for hand-offs and
wake-ups and re-checks; the other idle children wait for the token without touching Redis.
The token is an exclusive `flock` on a file the supervisor opens before forking; each child
opens it again (through the inherited descriptor where /proc allows), so the locks are per
child, and the kernel drops a lock when its holder dies, even by SIGKILL.

A leader gives the token up as its job starts. The unlock is left to a helper thread, which
runs once the job lets go of the interpreter, so the next leader's registration does not
compete with the job's start; the helper then keeps the token `hold` seconds
(`--leader-hold`) unless a wake-up arrives, so short jobs put one at a time run on one warm
child instead of going round every idle child. The blocking `flock` runs in that helper
(signals blocked); the job thread waits for it in short slices on a pipe, so signals and
the supervisor check still work. A token that arrives when it is no longer wanted is
passed straight on.
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

from django_qless.core.cluster.node_pubsub import poll_readable
from django_qless.core.signalmask import block_async_signals

__all__ = ["Leadership", "TokenFile", "open_leadership"]

log = logging.getLogger("django_qless.worker")

# The token file holds when the token last changed hands (CLOCK_MONOTONIC, the same in every
# process of the machine), written by each new leader while it holds the lock.
_STAMP = struct.Struct("d")


class TokenFile:
    """The token's file, created and kept open by the supervisor before it forks."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "leader")
        # Kept open (children inherit it): a child reopens the file through this descriptor.
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        if os.path.exists(f"/proc/self/fd/{self.fd}"):
            # The descriptor is all children need: remove the path now, so a worker killed
            # by SIGKILL leaves nothing behind and a temp cleaner has nothing to remove.
            os.unlink(self.path)
            os.rmdir(directory)
            self.path = ""

    def close(self) -> None:
        """Close the supervisor's descriptor (leaving)."""
        os.close(self.fd)


def open_leadership(token: TokenFile, hold: float = 0.0) -> Leadership | None:
    """Open this child's own claim on `token` (in the child); None if it cannot be opened
    (the child then waits on the engine as every idle child did before the token)."""
    try:
        try:
            # A new open file description of the same file, even if its path is gone.
            fd = os.open(f"/proc/self/fd/{token.fd}", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            if not token.path:
                raise
            fd = os.open(token.path, os.O_RDWR | os.O_CLOEXEC)  # no /proc (not Linux)
    except OSError as exc:
        log.warning("idle-leader token unavailable (%s): this child registers when idle", exc)
        return None
    finally:
        try:
            os.close(token.fd)  # the supervisor's description is not ours to keep
        except OSError:
            pass
    return Leadership(fd, hold)


class Leadership:
    """This child's claim on the idle-leader token (job thread API; one helper thread)."""

    def __init__(self, fd: int, hold: float = 0.0) -> None:
        # Our own open file description: flock locks are per description, not per process.
        self._fd = fd
        self._hold = hold  # seconds a token given up at a job's start is kept (see above)
        self._watch: tuple[int, ...] = ()  # sockets whose messages end that hold
        self._notify_r, self._notify_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        # The helper sleeps in a read of this pipe until the job thread gives it work (a byte
        # after each change of the state below): a write and a plain lock cost the job thread
        # less at a job's start than a Condition's Python-level notify.
        self._work_r, self._work_w = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self._work_w, False)
        self._lock = threading.Lock()  # guards the state below
        self._held = False
        self._wanted = False
        self._locking = False  # the helper is inside flock(): the job thread must not call it
        self._letting_go = False  # released by the job thread, still to unlock in the helper
        self._releases = 0  # soon-releases so far: a hold belongs to the one it started for
        self._thread: threading.Thread | None = None
        # A job that forks (without exec) must not take our lock's description with it: a
        # grandchild outliving us would keep the token held.
        os.register_at_fork(after_in_child=self._forget)

    @property
    def held(self) -> bool:
        """Tell whether this child is the leader now."""
        with self._lock:
            return self._held

    @property
    def notify_fd(self) -> int:
        """Return a file descriptor that becomes readable when the token was taken."""
        return self._notify_r

    def try_take(self) -> bool:
        """Take the token if it is free (no wait); return whether this child holds it."""
        if self._held:
            # Only this thread sets `_held` false (`release`), so no lock is needed to see it
            # true.
            return True
        with self._lock:
            if self._letting_go:
                # Given up, but the helper has not unlocked yet: the lock is still ours.
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
                self._drain()
                self._start_helper()
                self._wake_helper()

    def release(
        self, *, soon: bool = False, watch: Callable[[], Sequence[int]] | None = None
    ) -> None:
        """Give the token up (the next child waiting for it becomes leader); with `soon`,
        the helper thread unlocks it once this thread lets it run (a job starts now), after
        the hold, or at once when one of the sockets `watch()` names becomes readable
        (asked only if the token is held; never read there: only polled)."""
        with self._lock:
            if not self._held:
                return
            self._held = False
            if soon and self._thread is not None:
                self._letting_go = True
                self._releases += 1
                self._watch = tuple(watch()) if watch is not None else ()
                self._wake_helper()
                return
            self._letting_go = False
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
                idle = not letting_go and not self._locking
            if idle:
                self._await_work()
                continue
            if letting_go:
                self._let_go()
                continue
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)  # blocks until the leader lets go
            except OSError as exc:
                log.error("waiting for the idle-leader token failed: %s", exc)
                with self._lock:
                    self._locking = False
                    self._wanted = False  # the job thread's next want() retries
                self._notify()
                continue
            with self._lock:
                self._locking = False
                if self._wanted:
                    self._held = True
                    self._wanted = False
                    self._stamp()
                else:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)  # no longer wanted: pass it on
                    continue
            self._notify()

    def _let_go(self) -> None:
        """Unlock the token given up at a job's start, after the hold (unless the job thread
        took it back meanwhile); a message on a watched socket ends the hold at once."""
        with self._lock:
            release, watch = self._releases, self._watch
        if self._hold > 0:
            poll_readable(list(watch), self._hold)
        with self._lock:
            # A hold taken back and given up again meanwhile (the next job started) is that
            # job's hold, started afresh by the helper's loop: a message that ended this
            # poll, such as that job's own hand-off, must not cut it short.
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
        (changed,) = _STAMP.unpack(data)
        return max(0.0, time.monotonic() - float(changed))

    def _stamp(self) -> None:
        """Note that the token changed hands now (the lock is ours: nobody else writes)."""
        try:
            os.pwrite(self._fd, _STAMP.pack(time.monotonic()), 0)
        except OSError as exc:
            log.debug("could not note the token's change of hands: %s", exc)

    def _wake_helper(self) -> None:
        try:
            os.write(self._work_w, b"!")
        except BlockingIOError:
            pass  # the helper has bytes to read already

    def _await_work(self) -> None:
        """Helper thread: sleep until the job thread changed the state (a byte arrived)."""
        try:
            os.read(self._work_r, 64)
        except InterruptedError:
            pass

    def _notify(self) -> None:
        try:
            os.write(self._notify_w, b"!")
        except BlockingIOError:
            pass  # already readable

    def _drain(self) -> None:
        try:
            while os.read(self._notify_r, 64):
                pass
        except BlockingIOError:
            pass

    def _forget(self) -> None:
        """In a process forked by a job: drop the inherited descriptors (the lock stays ours)."""
        for fd in (self._fd, self._notify_r, self._notify_w, self._work_r, self._work_w):
            try:
                os.close(fd)
            except OSError:
                pass
