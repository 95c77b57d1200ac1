"""Run one job: look up its target, wrap it in hooks and middleware, settle the outcome.

A job that raises is failed with group = the exception's `module.QualName` and message = the
traceback (at most 64 KiB). A klass that is not in the registry is failed with group
`django_qless.UnknownJob` and is never imported. A job that neither completes nor fails
itself is completed by the caller (in the same round trip as the next reserve).
"""

from __future__ import annotations

import ctypes
import enum
import logging
import os
import signal
import threading
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from django_qless.core.exceptions import (
    InvalidArgument,
    InvalidStateTransition,
    JobNotFound,
    LostLockError,
    QlessError,
    UnregisteredJobClass,
)
from django_qless.core.registry import UNKNOWN_JOB_GROUP, Registry
from django_qless.core.workers.hooks import WorkerHooks, WorkerHooksProtocol, compose
from django_qless.core.workers.joblog import current_job, log_job, log_raised
from django_qless.core.workers.sandbox import Sandbox, set_current_sandbox
from django_qless.core.workers.worker_config import WorkerConfig

if TYPE_CHECKING:
    from django_qless.core.job import Job
    from django_qless.core.workers.execmode import ExecRunner

__all__ = [
    "AbortGuard",
    "JobAborted",
    "JobRunner",
    "Outcome",
    "error_group",
    "fail_refused_outcome",
    "format_failure",
]

log = logging.getLogger("django_qless.worker")

TIMEOUT_GROUP = "django_qless.JobTimeout"
KILLED_GROUP = "django_qless.JobKilled"
MAX_MESSAGE = 65536
_HEAD = 4096
_HANDLER_CACHE = 1024
# django_qless/ (with the separator, so a sibling "django_qless_x" is not ours).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


class JobAborted(BaseException):
    """Raised inside a job to stop it; `AbortGuard.reason` tells why.

    A BaseException, like KeyboardInterrupt, so `except Exception` in job code cannot
    swallow it.
    """


class Outcome(enum.Enum):
    """What happened to a job after its target returned or raised."""

    # The values are the job_finished signal's outcome names where the two meet.
    COMPLETED = "completed"  # returned normally, did not settle itself: the caller completes it
    SETTLED = "settled"  # the job completed, failed, retried or moved itself
    FAILED = "failed"  # raised (or unknown klass): we failed it
    LOST = "lost"  # the engine refused our fail: the lock is gone
    ABORTED = "aborted"  # stopped from outside; `AbortGuard.reason` says why


def error_group(exc: BaseException) -> str:
    """Return the failure group for an exception: its class's `module.QualName`."""
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"[:256]


def _ours(tb: TracebackType) -> bool:
    """Tell whether a traceback entry is in django_qless's own code (worker, glue)."""
    return os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PACKAGE_DIR)


def format_failure(exc: BaseException) -> str:
    """Return the traceback text from the job's own first frame, cut to at most 64 KiB.

    The worker's frames above the job (runner, hooks, middleware chain, the @job wrapper)
    are left out; if nothing but them is left, the whole traceback is kept.
    """
    tb = exc.__traceback__
    while tb is not None and _ours(tb):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
    raw = text.encode("utf-8", "replace")
    if len(raw) <= MAX_MESSAGE:
        return text
    marker = b"\n... [truncated] ...\n"
    tail = MAX_MESSAGE - _HEAD - len(marker)
    cut = raw[:_HEAD] + marker + raw[-tail:]
    return cut.decode("utf-8", "ignore")


class AbortGuard:
    """Deliver aborts to the job-running (main) thread only while it is inside job code."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._in_job = False
        self._pending = False
        self.reason: str | None = None
        self.thread_id = threading.main_thread().ident or 0
        # With signals installed (`kick_by_signal`), an abort asked for by another thread is
        # raised by the job thread's URG handler (`deliver`); without, it is scheduled as an
        # asynchronous exception, which lands at the job's next Python instruction.
        self.kick: Callable[[int], None] | None = None
        self._kicked = False

    def enter(self) -> None:
        """Mark the start of job code (call from the job-running thread)."""
        with self._lock:
            self.thread_id = threading.get_ident()
            self.reason = None
            self._pending = False
            self._kicked = False
            self._in_job = True

    def leave(self) -> None:
        """Mark the end of job code; swallow an abort that arrives too late to matter."""
        while True:
            try:
                with self._lock:
                    self._in_job = False
                    self._kicked = False
                    if self._pending:
                        _set_async_exc(self.thread_id, None)
                        self._pending = False
                return
            except JobAborted:
                continue

    def abort(self, reason: str, *, same_thread: bool = False) -> bool:
        """Stop the running job for `reason`; return False if no job is running.

        From a signal handler (`same_thread`) the exception is raised directly; from another
        thread the job thread is sent URG (see `kick`), or without signals the exception is
        scheduled with PyThreadState_SetAsyncExc.
        """
        with self._lock:
            if not self._in_job or self.reason is not None:
                return False
            self.reason = reason
            if same_thread:
                raise JobAborted(reason)
            if self.kick is not None:
                self._kicked = True
                self.kick(self.thread_id)
            else:
                self._pending = _set_async_exc(self.thread_id, JobAborted)
        return True

    def kick_by_signal(self) -> None:
        """Deliver aborts from other threads by URG (call where the handlers are installed)."""
        self.kick = _send_urg

    def deliver(self) -> None:
        """Raise the abort another thread asked for (the job thread's URG handler)."""
        with self._lock:
            if not (self._in_job and self._kicked):
                return  # the job ended first, or a stray URG
            self._kicked = False
        raise JobAborted(self.reason or "aborted")


def _send_urg(thread_id: int) -> None:
    """Interrupt the job thread: a blocking call returns and its URG handler runs."""
    try:
        signal.pthread_kill(thread_id, signal.SIGURG)
    except (ProcessLookupError, OSError):
        pass


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> bool:
    """Schedule (or with None, cancel) an exception in another thread."""
    obj = ctypes.py_object(exc) if exc is not None else None
    count = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), obj)
    return bool(count)


def fail_refused_outcome(job: Job, exc: QlessError) -> Outcome:
    """Log why the engine refused to fail `job` (a lost lock, or another error): LOST."""
    if isinstance(exc, (LostLockError, InvalidStateTransition, JobNotFound)):
        log_job(logging.WARNING, job, "job %s: not failed, this worker lost its lease: %s",
                job.jid, exc)
    else:
        log_job(logging.ERROR, job, "job %s: could not be failed: %s", job.jid, exc)
    return Outcome.LOST


class JobRunner:
    """Resolve and perform one job under hooks, middleware and a sandbox."""

    def __init__(
        self,
        config: WorkerConfig,
        hooks: WorkerHooksProtocol,
        registry: Registry,
        sandbox: Sandbox,
        guard: AbortGuard,
        *,
        remember: bool = False,
    ) -> None:
        self.config = config
        self.hooks = hooks
        self.registry = registry
        self.sandbox = sandbox
        self.guard = guard
        # With `remember`, what the last job returned and raised (None if it did not), for
        # callers that report on each job (run_queued, eager mode). The worker only needs
        # the Outcome and must not keep a finished job's traceback (and its frames) alive.
        self.remember = remember
        self.value: Any = None
        self.error: BaseException | None = None
        # The do-nothing hooks and no middleware: call the target directly (no closures).
        self._bare = type(hooks) is WorkerHooks and not config.middleware
        # (klass, queue) -> (registry entry, handler): resolving a handler inspects the target.
        self._handlers: dict[tuple[str, str], tuple[Any, Callable[[Job], Any]]] = {}
        self.exec_runner: ExecRunner | None = None
        if config.exec_command:  # (the module is loaded only for --exec)
            from django_qless.core.workers.execmode import ExecRunner

            self.exec_runner = ExecRunner(config.exec_command, config.timeout, config.kill_grace)

    def _target(self, job: Job) -> tuple[Callable[[Job], Any], tuple[Any, ...]]:
        """Return the callable and its per-job middleware (UnregisteredJobClass if none)."""
        if self.exec_runner is not None:
            return self.exec_runner, ()
        entry = self.registry.resolve(job.klass_name)
        key = (job.klass_name, job.queue_name)
        cached = self._handlers.get(key)
        if cached is not None and cached[0] is entry:
            return cached[1], entry.middleware
        handler = entry.handler(job.queue_name)
        if len(self._handlers) >= _HANDLER_CACHE:
            self._handlers.clear()
        self._handlers[key] = (entry, handler)
        return handler, entry.middleware

    def _call_hooked(
        self, job: Job, target: Callable[[Job], Any], middleware: tuple[Any, ...]
    ) -> None:
        """Call `target` inside around_job, before/after_job and the middleware."""
        error: BaseException | None = None

        def call_next() -> Any:
            nonlocal error
            self.hooks.before_job(job)
            try:
                return compose(middleware, job, lambda: target(job))()
            except BaseException as exc:
                error = exc
                raise
            finally:
                self.hooks.after_job(job, error)

        self.value = self.hooks.around_job(job, call_next)

    def run(self, job: Job, pre_abort: Callable[[], str | None] | None = None) -> Outcome:
        """Perform `job` and settle failures; the caller completes on Outcome.COMPLETED.

        `pre_abort` is asked once job code counts as running: a stop that arrived just
        before (too early for the signal handler to raise into the job) still aborts it.
        """
        outcome = self._run(job, pre_abort)
        if not self.remember:
            self.value = self.error = None
        return outcome

    def _run(self, job: Job, pre_abort: Callable[[], str | None] | None) -> Outcome:
        """Perform `job`, noting its return value and exception; see `run`."""
        self.value = self.error = None
        try:
            target, job_middleware = self._target(job)
        except UnregisteredJobClass as exc:
            self.error = exc
            log_job(logging.ERROR, job, "job %s: %s", job.jid, exc)
            return self.fail(job, UNKNOWN_JOB_GROUP, f"{exc}\nworker: {job.worker_name}")
        set_current_sandbox(self.sandbox)
        job.bind_sandbox(self.sandbox.get)
        running = current_job.set(job)
        try:
            try:
                self.guard.enter()
                reason = pre_abort() if pre_abort is not None else None
                if reason is not None:
                    self.guard.reason = reason
                    raise JobAborted(reason)
                if self._bare and not job_middleware:
                    self.value = target(job)
                else:
                    self._call_hooked(job, target, (*self.config.middleware, *job_middleware))
            finally:
                self.guard.leave()
        except JobAborted as exc:
            self.error = exc
            return Outcome.ABORTED
        except Exception as exc:
            self.error = exc
            if self.guard.reason is not None:
                # The abort landed inside a library that wrapped it; the abort wins.
                return Outcome.ABORTED
            return self._raised(job, exc)
        finally:
            current_job.reset(running)
            set_current_sandbox(None)
            job.bind_sandbox(None)
            self.sandbox.cleanup()
        if self.guard.reason == "lock_lost":
            return Outcome.LOST
        return Outcome.COMPLETED if job.state == "running" else Outcome.SETTLED

    def _raised(self, job: Job, exc: Exception) -> Outcome:
        """Log a job that raised and fail it, unless it settled itself first."""
        timed_out = self.exec_runner is not None and self.exec_runner.timed_out(exc)
        group = TIMEOUT_GROUP if timed_out else error_group(exc)
        log_raised(job, exc, group)
        if job.state != "running":
            # It settled itself first (a retry policy retries, then raises to say so):
            # that call is the outcome.
            return Outcome.SETTLED
        if self.exec_runner is not None and self.exec_runner.failed(exc):
            # The traceback would only show the worker's own code: the command's status
            # and stderr tail are the useful part.
            return self.fail(job, group, str(exc))
        return self.fail(job, group, format_failure(exc))

    def fail(self, job: Job, group: str, message: str) -> Outcome:
        """Fail `job` (as its holder); LOST if the engine says we no longer hold it."""
        if job.state != "running":
            # The job settled itself (e.g. completed) and then raised: nothing to fail.
            return Outcome.SETTLED
        try:
            job.fail(group, message)
            return Outcome.FAILED
        except InvalidArgument as exc:
            if job._data is None:  # not the job's data changes: nothing else to try
                log.error("job %s: could not be failed: %s", job.jid, exc)
                return Outcome.LOST
            # The data changes cannot be stored (not JSON, too large): fail with the stored data.
            job._drop_data_changes()
            return self.fail(job, group, f"{message}\nThe job's changes to its data were not "
                             f"saved: {exc}")
        except QlessError as exc:
            return fail_refused_outcome(job, exc)
