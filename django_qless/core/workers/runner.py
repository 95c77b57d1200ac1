"""Run one job: resolve its target, wrap it in hooks and middleware, settle the outcome.

A job that raises is failed with group = its exception's `module.QualName` and its traceback
(at most 64 KiB); an unregistered klass fails as `django_qless.UnknownJob`, never imported.
docs/worker.md, "Logs", names the fields the worker's records about a job carry.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import shutil
import traceback
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from django_qless.core import exceptions as errors
from django_qless.core.registry import UNKNOWN_JOB_GROUP, Middleware, Registry, TimeLimits
from django_qless.core.worker_options import WorkerConfig
from django_qless.core.workers.shutdown import AbortGuard, JobAborted

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["FIELDS", "LOST", "CompositeHooks", "JobContextFilter", "JobRunner", "Outcome",
           "Sandbox", "WorkerHooks", "WorkerInfo", "child_extra",
           "compose", "current_job", "current_sandbox", "error_group", "fail_job",
           "format_failure", "job_extra", "log_job", "stopped_failure"]

log = logging.getLogger("django_qless.worker")

TIMEOUT_GROUP = "django_qless.JobTimeout"
KILLED_GROUP = "django_qless.JobKilled"
EXEC_FAILED_GROUP = "django_qless.core.workers.execmode.ExecFailed"  # (its status and stderr)
MAX_MESSAGE = 65536
_HEAD = 4096
_HANDLER_CACHE = 1024
LOST = (errors.LostLockError, errors.InvalidStateTransition, errors.JobNotFound)
FIELDS = ("jid", "klass", "queue", "attempt", "worker")  # a job's fields on a log record
# django_qless/ (with the separator, so a sibling "django_qless_x" is not ours).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


class WorkerInfo(Protocol):
    """What hooks may read about the worker calling them."""

    @property
    def name(self) -> str: ...

    @property
    def queues(self) -> Sequence[str]: ...


class WorkerHooks:
    """Do-nothing hooks; subclass and override what you need."""

    def on_worker_start(self, worker: WorkerInfo) -> None:
        """Run once in the process that takes jobs (the child, or the serial worker)."""

    def on_worker_stop(self, worker: WorkerInfo) -> None:
        """Run once when that process stops taking jobs."""

    def before_fork(self) -> None:
        """Run in the supervisor right before every fork (close sockets, pools)."""

    def after_fork_child(self) -> None:
        """Run in a new child right after the fork."""

    def after_fork_parent(self, pid: int) -> None:
        """Run in the supervisor right after forking child `pid`."""

    def before_job(self, job: Job) -> None:
        """Run before each job (inside `around_job`)."""

    def after_job(self, job: Job, error: BaseException | None) -> None:
        """Run after each job, with the exception it raised if any."""

    def around_job(self, job: Job, call_next: Callable[[], Any]) -> Any:
        """Wrap one job; must call `call_next()` and return its result."""
        return call_next()


def _each(name: str, *, backwards: bool = False, guarded: bool = False) -> Any:
    """Return a `CompositeHooks` method calling hook method `name` on every hook."""

    def call(self: CompositeHooks, *args: Any) -> None:
        for hook in reversed(self.hooks) if backwards else self.hooks:
            try:
                getattr(hook, name)(*args)
            except Exception:
                if not guarded:
                    raise
                log.exception("%s hook %r failed", name, hook)

    return call


class CompositeHooks(WorkerHooks):
    """Call several hook objects in order; after_job and stops run in reverse, around_job
    nests (the first is outermost), and every stop hook runs even if one fails."""

    def __init__(self, *hooks: WorkerHooks) -> None:
        self.hooks = tuple(hooks)

    on_worker_start = _each("on_worker_start")
    on_worker_stop = _each("on_worker_stop", backwards=True, guarded=True)
    before_fork = _each("before_fork")
    after_fork_child = _each("after_fork_child")
    after_fork_parent = _each("after_fork_parent")
    before_job = _each("before_job")
    after_job = _each("after_job", backwards=True)

    def around_job(self, job: Job, call_next: Callable[[], Any]) -> Any:
        return compose([hook.around_job for hook in self.hooks], job, call_next)()


def compose(
    middleware: Sequence[Middleware], job: Job, perform: Callable[[], Any]
) -> Callable[[], Any]:
    """Return a thunk running `perform` inside `middleware` (the first one is outermost)."""

    def call(index: int) -> Any:
        if index == len(middleware):
            return perform()
        return middleware[index](job, lambda: call(index + 1))

    return lambda: call(0)


class Outcome(enum.Enum):
    """What happened to a job; the values are the job_finished signal's outcome names."""

    COMPLETED = "completed"  # returned normally, did not settle itself: the caller completes it
    SETTLED = "settled"  # the job completed, failed, retried or moved itself
    FAILED = "failed"  # raised (or unknown klass): we failed it
    LOST = "lost"  # the engine refused our fail: the lock is gone
    ABORTED = "aborted"  # stopped from outside; `AbortGuard.reason` says why


def stopped_failure(reason: str, limit: float) -> tuple[str, str]:
    """Return the failure group and message of a job stopped at its time limit or by USR1."""
    if reason == "timeout":
        return TIMEOUT_GROUP, f"job exceeded its time limit of {limit:g}s"
    return KILLED_GROUP, "job killed by USR1"


def error_group(exc: BaseException) -> str:
    """Return the failure group for an exception: its class's `module.QualName`."""
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"[:256]


def format_failure(exc: BaseException) -> str:
    """Return the traceback from the job's own first frame (all if none), at most 64 KiB."""
    tb: TracebackType | None = exc.__traceback__
    # (skip the runner, hooks, middleware, the @job wrapper)
    while tb and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
    raw = text.encode("utf-8", "replace")
    if len(raw) <= MAX_MESSAGE:
        return text
    marker = b"\n... [truncated] ...\n"
    tail = MAX_MESSAGE - _HEAD - len(marker)
    return (raw[:_HEAD] + marker + raw[-tail:]).decode("utf-8", "ignore")


def fail_job(job: Job, group: str, message: str) -> Outcome:
    """Fail `job` (as its holder); SETTLED if it settled itself, LOST if not ours now."""
    if job.state != "running":
        return Outcome.SETTLED  # (a retry policy retries, then raises to say so)
    try:
        job.fail(group, message)
        return Outcome.FAILED
    except errors.InvalidArgument as exc:
        if job._data is not None:  # data changes that cannot be stored (not JSON, too large)
            job._drop_data_changes()
            return fail_job(job, group, f"{message}\nThe job's changes to its data were not "
                            f"saved: {exc}")
        refused: errors.QlessError = exc
    except errors.QlessError as exc:
        refused = exc
    if isinstance(refused, LOST):
        log_job(logging.WARNING, job, "job %s: not failed, this worker lost its lease: %s",
                job.jid, refused)
    else:
        log_job(logging.ERROR, job, "job %s: could not be failed: %s", job.jid, refused)
    return Outcome.LOST


class JobRunner:
    """Resolve and perform one job under hooks, middleware and a sandbox."""

    def __init__(self, config: WorkerConfig, hooks: WorkerHooks, registry: Registry,
                 sandbox: Sandbox, guard: AbortGuard, *, remember: bool = False) -> None:
        self.config = config
        self.hooks = hooks
        self.registry = registry
        self.sandbox = sandbox
        self.guard = guard
        # With `remember`, the last job's value and exception stay for callers that report on
        # each job (run_queued, eager mode); a worker must not keep a traceback alive.
        self.remember = remember
        self.value: Any = None
        self.error: BaseException | None = None
        # The do-nothing hooks and no middleware: call the target directly (no closures).
        self._bare = type(hooks) is WorkerHooks and not config.middleware
        # (klass, queue) -> (registry entry, handler): resolving a handler inspects the target.
        self._handlers: dict[tuple[str, str], tuple[Any, Callable[[Job], Any]]] = {}
        self._default_limits = TimeLimits(config.timeout)
        self._exec: Callable[[Job], None] | None = None
        if config.exec_command:  # (the module is loaded only for --exec)
            from django_qless.core.workers.execmode import run_command

            self._exec = functools.partial(run_command, config.exec_command, config.kill_grace)

    def limits_of(self, job: Job) -> TimeLimits:
        """Return `job`'s time limits (its kind's, else --timeout; --exec: --timeout)."""
        if self._exec is not None:
            return self._default_limits
        try:
            entry = self.registry.resolve(job.klass_name)
        except errors.UnregisteredJobClass:
            return self._default_limits  # (failed at once by run())
        return entry.limits.over(self._default_limits)

    def _target(self, job: Job) -> tuple[Callable[[Job], Any], tuple[Middleware, ...]]:
        """Return the callable and its per-job middleware (UnregisteredJobClass if none)."""
        if self._exec is not None:
            return self._exec, ()
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

    def run(self, job: Job, pre_abort: Callable[[], str | None] | None = None) -> Outcome:
        """Perform `job` and fail it if it raised; the caller completes on COMPLETED."""
        self.value = self.error = None
        try:
            target, job_middleware = self._target(job)
        except errors.UnregisteredJobClass as exc:
            self.error = exc if self.remember else None
            log_job(logging.ERROR, job, "job %s: %s", job.jid, exc)
            return fail_job(job, UNKNOWN_JOB_GROUP, f"{exc}\nworker: {job.worker_name}")
        _current["sandbox"] = self.sandbox
        job.bind_sandbox(self.sandbox.get)
        running = current_job.set(job)
        try:
            try:
                self.guard.enter()
                # A stop that came just before, too early for its handler to raise into the
                # job, still aborts it.
                reason = pre_abort() if pre_abort is not None else None
                if reason is not None:
                    self.guard.reason = reason
                    raise JobAborted(reason)
                if self._bare and not job_middleware:
                    self.value = target(job)
                else:
                    chain = (self.hooks.around_job, self._before_after,
                             *self.config.middleware, *job_middleware)
                    self.value = compose(chain, job, lambda: target(job))()
            finally:
                self.guard.leave()
        except (JobAborted, Exception) as exc:
            self.error = exc
            # An abort that landed inside a library that wrapped it: the abort wins.
            if isinstance(exc, JobAborted) or self.guard.reason is not None:
                return Outcome.ABORTED
            return _fail_raised(job, exc)
        finally:
            current_job.reset(running)
            _current["sandbox"] = None
            job.bind_sandbox(None)
            self.sandbox.cleanup()
            if not self.remember:
                self.value = self.error = None
        if self.guard.reason == "lock_lost":
            return Outcome.LOST
        return Outcome.COMPLETED if job.state == "running" else Outcome.SETTLED

    def _before_after(self, job: Job, call_next: Callable[[], Any]) -> Any:
        """Call `call_next` (the middleware, then the job) between before_job and after_job."""
        self.hooks.before_job(job)
        error: BaseException | None = None
        try:
            return call_next()
        except BaseException as exc:
            error = exc
            raise
        finally:
            self.hooks.after_job(job, error)


class Sandbox:
    """`<root>/<worker name>`: empty when a job first asks for it, removed after the job."""

    def __init__(self, root: str, worker_name: str) -> None:
        self.path = os.path.join(root, worker_name)
        self._created = False
        self._remove()  # a crashed predecessor with the same (stable) name may have left files

    def get(self) -> str:
        """Return the sandbox directory, creating it empty on first use in a job."""
        if not self._created:  # (jobs that never ask cost no file-system work)
            self._remove()
            os.makedirs(self.path, mode=0o700, exist_ok=True)
            self._created = True
        return self.path

    def cleanup(self) -> None:
        """Remove the sandbox directory and everything in it (after each job)."""
        if self._created:
            self._remove()
            self._created = False

    def _remove(self) -> None:
        if os.path.lexists(self.path):
            shutil.rmtree(self.path, onerror=lambda _call, path, _exc: log.warning(
                "sandbox %s: could not remove %s", self.path, path))


# One job runs per process at a time: a plain holder (not thread-local) lets threads the
# job starts find its sandbox too.
_current: dict[str, Sandbox | None] = {"sandbox": None}
#: The job running in this context (set by the worker around the job's code).
current_job: ContextVar[Job | None] = ContextVar("django_qless_current_job", default=None)


def current_sandbox() -> str | None:
    """Return the running job's sandbox directory (empty at job start), or None."""
    sandbox = _current["sandbox"]
    return None if sandbox is None else sandbox.get()


def job_extra(job: Job) -> dict[str, Any]:
    """Return the `extra` fields that name `job` on a log record."""
    return {"jid": job.jid, "klass": job.klass_name, "queue": job.queue_name,
            "attempt": max(1, job.original_retries - job.retries + 1),
            "worker": job.worker_name}


def child_extra(child: Any) -> dict[str, Any]:
    """Return the `extra` fields of the job a forked child runs (the supervisor's view)."""
    return {"jid": child.jid, "klass": child.klass, "queue": child.queue, "attempt": None,
            "worker": child.name}


class JobContextFilter(logging.Filter):
    """Add the running job's fields to every record (None outside a job); never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Fill in the job's fields unless the worker named the job itself."""
        if not hasattr(record, "jid"):
            job = current_job.get()
            values = job_extra(job) if job is not None else dict.fromkeys(FIELDS)
            record.__dict__.update(values)
        return True


def _fail_raised(job: Job, exc: Exception) -> Outcome:
    """Log a job that raised (ERROR when it fails, WARNING on a retry) and fail it."""
    # A job that lets its soft limit's exception out failed for its time limit.
    soft = isinstance(exc, errors.SoftTimeLimitExceeded)
    group = TIMEOUT_GROUP if soft else error_group(exc)
    state, left = job.state, job.retries
    retried = state in ("waiting", "scheduled")  # by a retry policy, which then raised
    extra = job_extra(job)
    if retried or (state == "failed" and left < 0):
        extra["attempt"] = max(1, extra["attempt"] - 1)  # (the retry counted it)
    if retried and not getattr(exc, "logged", False):  # (else the policy logged the retry)
        when = "now" if state == "waiting" else "after its back-off"
        log.warning("job %s (%s) raised %s: %s; retried, runs again %s (%d retr%s left)",
                    job.jid, job.klass_name, group, _message(exc), when, left,
                    "y" if left == 1 else "ies", extra=extra)
    elif state in ("running", "failed"):
        spent = state == "failed" or left <= 0 < job.original_retries
        log.error("job %s (%s) %s: %s: %s", job.jid, job.klass_name,
                  "failed, no retries left" if spent else "failed", group, _message(exc),
                  exc_info=(type(exc), exc, exc.__traceback__), extra=extra)
    elif not retried:  # it completed or moved itself, then raised
        log.warning("job %s (%s) settled itself (%s), then raised %s: %s", job.jid,
                    job.klass_name, state, group, _message(exc), extra=extra)
    # (--exec: the command's status and stderr say more than the worker's own frames)
    return fail_job(job, group, str(exc) if group == EXEC_FAILED_GROUP
                    else format_failure(exc))


def log_job(level: int, job: Job, message: str, *args: Any) -> None:
    """Log `message` about `job` at `level` with the job's fields as extra."""
    if log.isEnabledFor(level):
        log.log(level, message, *args, extra=job_extra(job))


def _message(exc: BaseException) -> str:
    """Return the exception's text and, for a wrapper (a retry), its cause's."""
    text = str(exc) or type(exc).__name__
    if exc.__cause__ is not None and str(exc.__cause__):
        text = f"{text}: {exc.__cause__}"
    return text[:2000]
