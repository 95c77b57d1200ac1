"""Keep asynchronous signals off helper threads, so they reach the thread running jobs."""

from __future__ import annotations

import signal

__all__ = ["block_async_signals"]

# Raised by a thread's own fault: blocking them would hide a crash in that thread.
_SYNCHRONOUS = frozenset({
    signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT,
    signal.SIGTRAP, signal.SIGSYS, signal.SIGKILL, signal.SIGSTOP,
})


def block_async_signals() -> None:
    """Block every asynchronous signal in the calling (helper) thread.

    Linux delivers a process-directed signal (TERM from `kill`, the parent-death signal, QUIT,
    ...) to any thread that does not block it. Python runs the handler in the main thread
    anyway, but only the receiving thread's blocking call is interrupted: if a helper thread
    took the signal while the main thread sat in a job's `time.sleep(3)`, the handler (and the
    job's abort) would wait until the sleep ended. With every helper thread blocking them, the
    kernel always picks the main thread. Call it first thing in a helper thread's `run`.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals() - _SYNCHRONOUS)
