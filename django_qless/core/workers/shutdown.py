"""OS signals: handlers only record what was asked; the worker loops act on it.

docs/worker.md, "OS signals and exit codes", says what each signal does. URG is the worker's
own: another thread sends it to the job thread to abort the running job (`AbortGuard`),
because an exception scheduled from that thread would land in whatever Python code runs
next, such as another signal's handler before it recorded anything.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

__all__ = ["AbortGuard", "ExitCode", "JobAborted", "SignalState", "WakePipe", "reset_child_signals"]


class ExitCode(enum.IntEnum):
    """Process exit codes of the worker (supervisor and serial worker)."""

    OK = 0  # stopped as asked (QUIT, TERM/INT with jobs finished or released, max-jobs, ...)
    ERROR = 1  # fatal error (cannot reach Redis at start, hooks raised, ...)
    USAGE = 2  # bad options
    FORCED = 3  # one TERM/INT more than gives jobs back: children killed without waiting
    UNRELEASED = 4  # stopped, but some in-flight jobs could not be released (lease expiry)
    # Child-only codes (seen by the supervisor, never by a shell).
    CHILD_ABORTED = 75  # the child aborted its job to stop; the supervisor disposes of it
    CHILD_CRASHED = 70  # unexpected exception in the child's loop
    CHILD_ORPHANED = 76  # the supervisor died; the child released its job and left


class WakePipe:
    """A non-blocking self-pipe: signals (via set_wakeup_fd) and threads wake a select()."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def wake(self) -> None:
        """Make the next (or current) wait return."""
        with contextlib.suppress(OSError):  # (a full pipe: a wake-up is pending anyway)
            os.write(self.write_fd, b"\0")

    def drain(self) -> None:
        """Consume pending wake-ups."""
        with contextlib.suppress(OSError):
            while os.read(self.read_fd, 4096):
                pass

    def close(self) -> None:
        """Close both ends."""
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


_ENDING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# What the other signals set (USR1 is cleared by the loop once acted on, as is dump_stacks).
_FLAGS: dict[int, dict[str, bool]] = {
    signal.SIGQUIT: {"graceful": True},
    signal.SIGUSR1: {"kill_current": True},
    signal.SIGUSR2: {"paused": True, "dump_stacks": True},
    signal.SIGCONT: {"paused": False},
}


class SignalState:
    """Flags set by signal handlers, read by the loop; optional per-signal callback.

    With a `term_grace`, the first TERM/INT drains as QUIT does, until `drain_over`; every
    other TERM/INT, and each HUP, is one more stop request (1: give the jobs back, 2: force).
    """

    HANDLED = (*_ENDING, *_FLAGS, signal.SIGURG)

    def __init__(self, *, term_grace: float = 0.0) -> None:
        self.wake_pipe = WakePipe()
        self.term_grace = term_grace
        self.stop_requests = 0  # stops that give the running jobs back (TERM/INT/HUP, grace)
        self.graceful = False  # QUIT, or TERM/INT draining
        self.drain_deadline: float | None = None  # (monotonic) set by a draining TERM/INT
        self.kill_current = self.paused = self.dump_stacks = False
        self.callback: Callable[[int], None] | None = None
        self.on_kick: Callable[[], None] | None = None  # URG: deliver another thread's abort
        self._deferred: list[int] = []  # signals that arrived during our own handler
        self._previous: dict[int, object] = {}
        self._terminated = False  # a TERM/INT/HUP arrived (see uninstall)
        self._old_wakeup_fd = -1

    def request_stop(self, graceful: bool = True) -> None:
        """Ask the loop to stop (graceful: finish running jobs first)."""
        if graceful:
            self.graceful = True
        else:
            self.stop_requests += 1
        self.wake_pipe.wake()

    @property
    def stopping(self) -> bool:
        """Tell whether the loop should take no more jobs and leave."""
        return self.graceful or self.stop_requests > 0

    @property
    def draining(self) -> bool:
        """Tell whether running jobs are being let finish before the exit (TERM/INT or QUIT)."""
        return self.graceful and not self.stop_requests

    def drain_left(self) -> float | None:
        """Return the seconds a draining TERM/INT still lets jobs run (None: no such drain)."""
        if self.drain_deadline is None or not self.draining:
            return None
        return max(0.0, self.drain_deadline - time.monotonic())

    def drain_over(self) -> bool:
        """Turn a drain whose grace ran out into a stop giving the jobs back; True if it did."""
        if self.drain_left() != 0.0:  # (None: no such drain)
            return False
        self.stop_requests += 1
        return True

    def install(self) -> None:
        """Install the handlers (main thread only) and route signal wake-ups to the pipe."""
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("signal handlers can only be installed from the main thread")
        for signum in self.HANDLED:
            self._previous[signum] = signal.signal(signum, self._handle)
        # C-level dump first (works even if Python code is stuck), then our flag handler.
        faulthandler.register(signal.SIGUSR2, file=sys.stderr, all_threads=True, chain=True)
        self._old_wakeup_fd = signal.set_wakeup_fd(self.wake_pipe.write_fd,
                                                   warn_on_full_buffer=False)

    def uninstall(self) -> None:
        """Restore the previous handlers; after a TERM/INT/HUP, ignore those instead."""
        if not self._previous:
            return
        with contextlib.suppress(RuntimeError, ValueError):
            faulthandler.unregister(signal.SIGUSR2)
        for signum, previous in self._previous.items():
            # A repeated TERM must not end the exiting process by the signal (exit 143): the
            # interpreter resets Python handlers as it exits, but not SIG_IGN.
            ignore = self._terminated and signum in _ENDING
            signal.signal(signum, signal.SIG_IGN if ignore else previous)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._old_wakeup_fd)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Records the request, then acts on it: no I/O beyond the wake byte (set_wakeup_fd).
        if signum in _ENDING:
            self._terminated = True
            if (signum != signal.SIGHUP and self.term_grace > 0 and self.drain_deadline is None
                    and not self.stop_requests):
                self.graceful = True
                self.drain_deadline = time.monotonic() + self.term_grace
            else:
                self.stop_requests += 1
        self.__dict__.update(_FLAGS.get(signum, {}))
        if _inside_handler(frame):
            # Python runs a signal's handler inside another's: what ours act on may raise
            # into the job (an abort), which must not cut the outer handler short.
            self._deferred.append(signum)
            return
        try:
            self._act(signum)
            while self._deferred:
                self._act(self._deferred.pop(0))
        finally:
            self._deferred.clear()  # an act raised: the job is being aborted already

    def _act(self, signum: int) -> None:
        if signum == signal.SIGURG and self.on_kick is not None:
            self.on_kick()
        if self.callback is not None:
            self.callback(signum)


def _inside_handler(frame: FrameType | None) -> bool:
    """Tell whether `frame` (the code a signal interrupted) is inside `SignalState._handle`."""
    while frame is not None:
        if frame.f_code is SignalState._handle.__code__:
            return True
        frame = frame.f_back
    return False


def reset_child_signals() -> None:
    """Give a freshly forked child default handlers and no inherited wake-up fd."""
    with contextlib.suppress(RuntimeError, ValueError):  # (not the main thread, no dump)
        signal.set_wakeup_fd(-1)
        faulthandler.unregister(signal.SIGUSR2)
    for signum in (*SignalState.HANDLED, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)


class JobAborted(BaseException):
    """Raised inside a job to stop it (`AbortGuard.reason` says why); a BaseException, like
    KeyboardInterrupt, so `except Exception` in job code cannot swallow it."""


class AbortGuard:
    """Deliver aborts to the job-running (main) thread only while it is inside job code.

    With signals installed (`kick_by_signal`), an abort asked for by another thread is raised
    by the job thread's URG handler (`deliver`); without, it is scheduled as an asynchronous
    exception, which lands at the job's next Python instruction.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._in_job = self._pending = self._kicked = False
        self.reason: str | None = None
        self.thread_id = threading.main_thread().ident or 0
        self.kick: Callable[[int], None] | None = None
        self._raise: BaseException | None = None  # what `deliver` raises

    def enter(self) -> None:
        """Mark the start of job code (call from the job-running thread)."""
        with self._lock:
            self.thread_id = threading.get_ident()
            self.reason = self._raise = None
            self._pending = self._kicked = False
            self._in_job = True

    def leave(self) -> None:
        """Mark the end of job code; swallow an abort that arrives too late to matter."""
        while True:
            try:
                with self._lock:
                    self._in_job = self._kicked = False
                    if self._pending:
                        _set_async_exc(self.thread_id, None)
                        self._pending = False
                return
            except JobAborted:
                continue

    def abort(self, reason: str, *, same_thread: bool = False) -> bool:
        """Stop the running job for `reason` (`same_thread`: raised here, in a signal
        handler); return False if no job is running."""
        return self.interrupt(JobAborted(reason), reason, same_thread=same_thread)

    def interrupt(self, exc: BaseException, reason: str | None = None, *,
                  same_thread: bool = False) -> bool:
        """Raise `exc` in the job thread: without a `reason`, a warning the job may catch."""
        with self._lock:
            if not self._in_job or self.reason is not None:
                return False
            self.reason, self._raise = reason, exc
            if same_thread and reason is not None:
                raise exc
            if self.kick is not None:
                self._kicked = True
                self.kick(self.thread_id)
            else:
                self._pending = _set_async_exc(self.thread_id, type(exc))
        return True

    def kick_by_signal(self) -> None:
        """Deliver aborts from other threads by URG (call where the handlers are installed)."""
        self.kick = _send_urg

    def deliver(self) -> None:
        """Raise the abort another thread asked for (the job thread's URG handler)."""
        with self._lock:
            if not (self._in_job and self._kicked) or self._raise is None:
                return  # the job ended first, or a stray URG
            self._kicked = False
            exc = self._raise
        raise exc  # (only once a job: a warning is never raised twice)


def _send_urg(thread_id: int) -> None:
    """Interrupt the job thread: a blocking call returns and its URG handler runs."""
    with contextlib.suppress(OSError):
        signal.pthread_kill(thread_id, signal.SIGURG)


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> bool:
    """Schedule (or with None, cancel) an exception in another thread."""
    obj = ctypes.py_object(exc) if exc is not None else None
    return bool(ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), obj))
