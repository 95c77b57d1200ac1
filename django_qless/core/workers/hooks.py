"""`WorkerHooks`: the seam through which a framework (Django) joins the worker's life.

The Django side closes its database connections in `before_fork()` (before *every* fork, not
once at boot: inherited sockets break TLS in every later child) and wraps each job with
`close_old_connections()` in `around_job`. Every method has a do-nothing default, so a
subclass overrides only what it needs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from django_qless.core.registry import Middleware

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["CompositeHooks", "Middleware", "WorkerHooks", "WorkerHooksProtocol", "WorkerInfo",
           "compose"]

log = logging.getLogger("django_qless.worker")


class WorkerInfo(Protocol):
    """What hooks may read about the worker calling them."""

    @property
    def name(self) -> str: ...

    @property
    def queues(self) -> Sequence[str]: ...


@runtime_checkable
class WorkerHooksProtocol(Protocol):
    """The methods the worker calls; `WorkerHooks` implements all of them as no-ops."""

    def on_worker_start(self, worker: WorkerInfo) -> None: ...

    def on_worker_stop(self, worker: WorkerInfo) -> None: ...

    def before_fork(self) -> None: ...

    def after_fork_child(self) -> None: ...

    def after_fork_parent(self, pid: int) -> None: ...

    def before_job(self, job: Job) -> None: ...

    def after_job(self, job: Job, error: BaseException | None) -> None: ...

    def around_job(self, job: Job, call_next: Callable[[], Any]) -> Any: ...


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


class CompositeHooks(WorkerHooks):
    """Call several hook objects in order (around_job nests: first is outermost)."""

    def __init__(self, *hooks: WorkerHooksProtocol) -> None:
        self.hooks = tuple(hooks)

    def on_worker_start(self, worker: WorkerInfo) -> None:
        for hook in self.hooks:
            hook.on_worker_start(worker)

    def on_worker_stop(self, worker: WorkerInfo) -> None:
        # Stop hooks run even if one fails: the process is leaving anyway.
        for hook in reversed(self.hooks):
            try:
                hook.on_worker_stop(worker)
            except Exception:
                log.exception("on_worker_stop hook %r failed", hook)

    def before_fork(self) -> None:
        for hook in self.hooks:
            hook.before_fork()

    def after_fork_child(self) -> None:
        for hook in self.hooks:
            hook.after_fork_child()

    def after_fork_parent(self, pid: int) -> None:
        for hook in self.hooks:
            hook.after_fork_parent(pid)

    def before_job(self, job: Job) -> None:
        for hook in self.hooks:
            hook.before_job(job)

    def after_job(self, job: Job, error: BaseException | None) -> None:
        for hook in reversed(self.hooks):
            hook.after_job(job, error)

    def around_job(self, job: Job, call_next: Callable[[], Any]) -> Any:
        def nest(index: int) -> Any:
            if index == len(self.hooks):
                return call_next()
            return self.hooks[index].around_job(job, lambda: nest(index + 1))

        return nest(0)


def compose(
    middleware: Sequence[Middleware], job: Job, perform: Callable[[], Any]
) -> Callable[[], Any]:
    """Return a thunk running `perform` inside `middleware` (the first one is outermost)."""

    def call(index: int) -> Any:
        if index == len(middleware):
            return perform()
        return middleware[index](job, lambda: call(index + 1))

    return lambda: call(0)
