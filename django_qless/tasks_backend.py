"""A ``django.tasks`` backend (Django 6) / ``django_tasks`` backend (the backport) on qless.

    TASKS = {"default": {"BACKEND": "django_qless.tasks_backend.QlessBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"CLIENT": None, "RETRIES": 0, "ENQUEUE_ON_COMMIT": None}}}

Each task becomes a qless job whose klass is the task's own path (``shop.tasks.send_email``),
so the worker log, the job page, ``qless get`` and search by klass name the task; its data
repeats the path (``task_path``) with the arguments; the result id is the jid. The worker
runs only tasks in its registry: ``register_task`` adds one (done at enqueue, and by
``registry.setup()`` in workers for every task it finds after importing each app's
``tasks`` and ``jobs`` modules and ``JOB_MODULES``). Jobs of the older klass
``django_qless.tasks_backend.DjangoTaskJob`` still run. State
mapping for ``get_result``: waiting/scheduled/depends/throttled/stalled -> READY (a stalled
job's lease expired and another worker will take it), running -> RUNNING, complete ->
SUCCESSFUL, failed -> FAILED; a canceled or expired job does not exist. Arguments are
checked against the task's signature and encoded as ``@job``'s (``DjangoJSONEncoder``:
datetimes, Decimals, UUIDs become strings). ``OPTIONS``:
``CLIENT`` (qless alias; default: routed by queue), ``RETRIES`` (qless retries, default 0)
and ``ENQUEUE_ON_COMMIT`` (default: ``QLESS["COMMIT_MODE"]``).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from datetime import UTC, datetime
from traceback import format_exception
from types import ModuleType
from typing import TYPE_CHECKING, Any

from django.core import checks
from django.utils import timezone
from django.utils.module_loading import import_string

try:  # Django >= 6.0
    from django.tasks import TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # the django-tasks backport (Django 5.2)
    from django_tasks import (  # type: ignore[assignment]
        TaskContext,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[assignment]
    from django_tasks.base import Task, TaskError  # type: ignore[assignment]
    from django_tasks.exceptions import (  # type: ignore[assignment]
        InvalidTaskError,
        TaskResultDoesNotExist,
    )
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

from django_qless.conf import get_settings
from django_qless.core.serialization import new_jid
from django_qless.core.workers.runner import error_group
from django_qless.options import JobOptions, check_timing, dispatch, encode_arguments
from django_qless.registry import register_job

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["KLASS", "DjangoTaskJob", "QlessBackend", "TaskJob", "register_task",
           "register_tasks_in"]

KLASS = "django_qless.tasks_backend.DjangoTaskJob"
STATUS = {
    "running": TaskResultStatus.RUNNING,
    "complete": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
}


def _when(value: Any) -> datetime | None:
    """Return an aware datetime for an engine timestamp."""
    if not value:
        return None
    return datetime.fromtimestamp(float(value), tz=UTC)


def _json_arguments(task: Any, args: Any, kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    """Check the arguments against the task's signature and encode them as @job does."""
    try:
        signature: inspect.Signature | None = inspect.signature(task.func)
    except (TypeError, ValueError):
        signature = None
    if signature is not None and task.takes_context:
        # The worker passes the context first; callers never do.
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    return encode_arguments(task.module_path, signature, list(args), dict(kwargs))


class QlessBackend(BaseTaskBackend):
    """Run django.tasks tasks as qless jobs."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.qless_alias: str | None = self.options.get("CLIENT")
        self.retries = int(self.options.get("RETRIES", 0))
        on_commit = self.options.get("ENQUEUE_ON_COMMIT")
        self.commit_mode = None if on_commit is None else (
            "on_commit" if on_commit else "immediate")

    def _client_alias(self, queue: str) -> str:
        return self.qless_alias or get_settings().alias_for_queue(queue)

    def _check_importable(self, task: Any) -> None:
        """Require the task to be importable by its path (the worker imports it so)."""
        try:
            found = import_string(task.module_path)
        except ImportError:
            found = None
        if getattr(found, "func", None) is not task.func:
            raise InvalidTaskError(
                f"Task {task.module_path} must be importable from its module path "
                "(a module-level @task)."
            )

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Put a job running ``task`` with these arguments; the result id is the jid."""
        self.validate_task(task)
        self._check_importable(task)
        register_task(task)  # a worker in this process (run_queued) runs it too
        args, kwargs = _json_arguments(task, args, kwargs)
        jid = new_jid()
        result: Any = TaskResult(
            task=task, id=jid, status=TaskResultStatus.READY, enqueued_at=None,
            started_at=None, finished_at=None, last_attempted_at=None,
            args=list(args), kwargs=dict(kwargs),  # TaskResult normalises them to JSON
            backend=self.alias, errors=[], worker_ids=[],
        )
        data = {"task_path": task.module_path, "args": result.args, "kwargs": result.kwargs,
                "takes_context": task.takes_context, "backend": self.alias}
        alias = self._client_alias(task.queue_name)
        options = JobOptions(queue=task.queue_name, priority=task.priority,
                             retries=self.retries, client=alias, jid=jid,
                             commit_mode=self.commit_mode)
        # Refuse now, in the caller's transaction, what the put would refuse after the commit.
        options.validate(data)
        check_timing(options, when=task.run_after)

        def send() -> None:
            from django_qless.clients import get_client

            client = get_client(alias).for_queue(task.queue_name)
            delay = 0.0
            if task.run_after is not None:
                delay = max(0.0, task.run_after.timestamp() - client.now())
            client.queues[task.queue_name].put(task.module_path, data, jid=jid,
                                               priority=task.priority, delay=delay,
                                               retries=self.retries)
            object.__setattr__(result, "enqueued_at", timezone.now())
            task_enqueued.send(sender=type(self), task_result=result)

        dispatch(options, send, f"task {task.module_path} jid={jid}")
        return result

    def get_result(self, result_id: str) -> Any:
        """Build a TaskResult from the qless job (TaskResultDoesNotExist if it is gone)."""
        from django_qless.clients import get_client
        from django_qless.core.exceptions import InvalidArgument
        from django_qless.core.job import Job

        aliases = [self.qless_alias] if self.qless_alias else list(get_settings().aliases)
        for alias in aliases:
            # Only the jid is known: a sharded alias asks every shard (one round trip each).
            try:
                job = get_client(alias).find_job(result_id)
            except InvalidArgument:
                raise TaskResultDoesNotExist(result_id) from None
            if isinstance(job, Job) and _is_task_job(job):
                return self._result_from_job(job)
        raise TaskResultDoesNotExist(result_id)

    def _result_from_job(self, job: Job) -> Any:
        data = job.data
        task = import_string(data["task_path"])
        try:
            task = task.using(queue_name=job.queue_name or task.queue_name,
                              priority=max(-100, min(100, job.priority)), backend=self.alias)
        except InvalidTaskError:
            pass  # e.g. moved to a queue this backend does not list: keep the task's own
        history = job.history
        put = [h for h in history if h.get("what") == "put"]
        popped = [h for h in history if h.get("what") == "popped"]
        ended = [h for h in history if h.get("what") in ("done", "failed")]
        errors = []
        if job.state == "failed" and job.failure:
            errors.append(TaskError(exception_class_path=str(job.failure.get("group", "")),
                                    traceback=str(job.failure.get("message", ""))))
        result: Any = TaskResult(
            task=task, id=job.jid, status=STATUS.get(job.state, TaskResultStatus.READY),
            enqueued_at=_when(put[0].get("when")) if put else None,
            started_at=_when(popped[0].get("when")) if popped else None,
            finished_at=_when(ended[-1].get("when"))
            if ended and job.state in ("complete", "failed") else None,
            last_attempted_at=_when(popped[-1].get("when")) if popped else None,
            args=data.get("args", []), kwargs=data.get("kwargs", {}), backend=self.alias,
            errors=errors, worker_ids=[str(h.get("worker", "")) for h in popped],
        )
        if job.state == "complete":
            object.__setattr__(result, "_return_value", data.get("result"))
        return result

    def check(self, **kwargs: Any) -> list[Any]:
        """Check the alias option and the QLESS settings (no network I/O)."""
        from django.apps import apps

        messages: list[checks.CheckMessage] = []
        if not apps.is_installed("django_qless"):
            messages.append(checks.Error("QlessBackend needs 'django_qless' in INSTALLED_APPS.",
                               hint="Add 'django_qless' to INSTALLED_APPS.",
                               id="django_qless.E090"))
        if self.qless_alias and self.qless_alias not in get_settings().aliases:
            messages.append(checks.Error(
                f"TASKS[{self.alias!r}]['OPTIONS']['CLIENT'] names unknown qless alias "
                f"{self.qless_alias!r}.", hint="Define it in QLESS or remove CLIENT.",
                id="django_qless.E091"))
        from django_qless.core.exceptions import InvalidArgument
        from django_qless.core.serialization import check_name

        for queue in sorted(self.queues):
            try:
                check_name("queue", queue)
            except InvalidArgument as exc:
                messages.append(checks.Error(
                    f"TASKS[{self.alias!r}]['QUEUES'] has an invalid qless queue name: {exc}.",
                    hint="Queue names are 1-64 characters of letters, digits, '_', '.', '-'.",
                    id="django_qless.E092"))
        return messages


def _is_task_job(job: Job) -> bool:
    """Tell whether a job was put by this backend (klass: the task path, or the old shim)."""
    data = job.data
    path = data.get("task_path") if isinstance(data, dict) else None
    return isinstance(path, str) and job.klass_name in (path, KLASS)


class TaskJob:
    """The registry entry that runs one django.tasks task: its path is the job's klass."""

    __slots__ = ("task",)

    def __init__(self, task: Any) -> None:
        self.task = task

    def __repr__(self) -> str:
        return f"<TaskJob {self.task.module_path}>"

    def __call__(self, job: Job) -> Any:
        """Run the task for a worker."""
        return run_task(self.task, job)


def register_task(task: Any) -> None:
    """Let workers in this process run ``task`` (registered under its path)."""
    register_job(task.module_path, TaskJob(task))


def register_tasks_in(modules: Iterable[ModuleType]) -> int:
    """Register every task using a QlessBackend defined in ``modules``; return how many."""
    found = 0
    for module in modules:
        for value in list(vars(module).values()):
            if not isinstance(value, Task) or value.module_path.rpartition(".")[0] != (
                    module.__name__):
                continue  # not a task, or one imported from elsewhere (registered there)
            try:
                backend = value.get_backend()
            except Exception:  # noqa: BLE001, S112 - a task of a backend not configured
                continue
            if isinstance(backend, QlessBackend):
                register_task(value)
                found += 1
    return found


class DjangoTaskJob:
    """The klass the backend used to put tasks under (the task path in the data)."""

    @staticmethod
    def process(job: Job) -> Any:
        """Run the task named by the job data (a registered task, else imported)."""
        from django_qless.registry import get_registry

        path = job.data["task_path"]
        entry = get_registry().resolve(path) if path in get_registry() else None
        target = entry.target if entry is not None else None
        task = target.task if isinstance(target, TaskJob) else import_string(path)
        return run_task(task, job)


def run_task(task: Any, job: Job) -> Any:
    """Run ``task`` with the job's arguments; keep its JSON return value; send the signals."""
    from django_qless.options import RESULT_KEY

    data = job.data
    backend = task.get_backend()
    now = timezone.now()
    result: Any = TaskResult(
        task=task, id=job.jid, status=TaskResultStatus.RUNNING, enqueued_at=None,
        started_at=now, finished_at=None, last_attempted_at=now,
        args=data.get("args", []), kwargs=data.get("kwargs", {}), backend=backend.alias,
        errors=[], worker_ids=[job.worker_name],
    )
    task_started.send(sender=type(backend), task_result=result)
    try:
        if data.get("takes_context"):
            value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
        else:
            value = task.call(*result.args, **result.kwargs)
        value = normalize_json(value)
    except Exception as exc:
        # Only the task's own errors: an abort (shutdown, lost lock, time limit) is a
        # BaseException and gives the job back, so the task has not failed.
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        object.__setattr__(result, "finished_at", timezone.now())
        result.errors.append(TaskError(exception_class_path=error_group(exc),
                                       traceback="".join(format_exception(exc))))
        task_finished.send(sender=type(backend), task_result=result)
        raise
    job.data[RESULT_KEY] = value
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    task_finished.send(sender=type(backend), task_result=result)
    return value


register_job(KLASS, DjangoTaskJob)
