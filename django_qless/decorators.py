"""``@job``: turn a module-level function or a qless job class into an enqueueable job.

Functions::

    @job(queue="emails", priority=10, retries=3, retry_on=[SMTPException])
    def send_welcome(user_id: int) -> str: ...

    send_welcome.enqueue(42)                                  # JobHandle (jid, status)
    send_welcome.using(priority=50, depends=[jid]).enqueue(42)
    send_welcome.enqueue_in(timedelta(minutes=5), 42)
    send_welcome.enqueue_at(tomorrow_9am, 42)
    send_welcome.recur(3600, 42)                              # every hour
    send_welcome(42)                                          # plain call, no queue

Classes keep qless's shape (a ``process(job)`` static method or one named after a queue,
``default_job_options(data)``) and gain ``enqueue(data)``, ``using``, ``enqueue_in``,
``enqueue_at`` and ``recur``. Every enqueue waits for ``transaction.on_commit`` when inside an
atomic block unless ``COMMIT_MODE`` (or the ``commit_mode``/``on_commit`` option) says otherwise.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from asgiref.sync import async_to_sync, sync_to_async

from django_qless.core.client import Client
from django_qless.core.job import Job
from django_qless.core.queue import Queue
from django_qless.core.registry import TimeLimits, klass_name_of
from django_qless.core.scheduling.ratelimit import RateLimitError
from django_qless.handle import warn_if_not_installed
from django_qless.options import (
    ACTIVE_STATES,
    KIND_LIMITS,
    Backoff,
    Delay,
    InvalidJobArgument,
    JobHandle,
    JobOptions,
    RetryPolicy,
    When,
    check_timing,
    dispatch,
    encode_arguments,
    resolve_delay,
    to_json,
    unique_jid,
)
from django_qless.ratelimits import DATA_KEY, ensure_kind_limit, function_rate_key
from django_qless.registry import register_job
from django_qless.retries import RetryPriority
from django_qless.running import RetryScheduled, eager_active, perform_function, run_eager
from django_qless.schedules import declare, pop_cron_options

if TYPE_CHECKING:
    from django_qless.workflows import Signature

__all__ = [
    "Backoff", "JobClass", "JobFunction", "JobHandle", "RetryPolicy", "RetryScheduled",
    "enqueue", "job", "perform_function",
]

log = logging.getLogger("django_qless")

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)


class _Sender:
    """Build data for a job kind and send it according to its options."""

    klass: str
    options: JobOptions
    rate_path = ""  # the data path a keyed kind limit reads (JobFunction: DATA_KEY)

    def _send(self, data: dict[str, Any], options: JobOptions, *,
              delay: Delay | None = None, when: When | None = None,
              interval: Delay | None = None) -> JobHandle:
        warn_if_not_installed()
        if options.unique is not None and options.jid is None:
            options = options.merge({"jid": unique_jid(self.klass, data)})
        if options.jid is None:
            from django_qless.core.serialization import new_jid

            options = options.merge({"jid": new_jid()})
        assert options.jid is not None
        options.validate(data)
        check_timing(options, delay=delay, when=when, interval=interval)
        handle = JobHandle(options.jid, self.klass, options.queue, options.alias)
        if eager_active(options.alias):
            # Eager mode runs at once, even inside a transaction: a test that never commits
            # (pytest-django, TestCase) still sees the job run.
            handle._value = run_eager(self.klass, data, options)
            handle.status = "eager"
            return handle

        def send() -> None:
            try:
                handle.status = _put(self.klass, data, options, delay=delay, when=when,
                                     interval=interval,
                                     rate_path=self.rate_path or options.rate_key or "")
            except BaseException:
                handle.status = "error"
                raise

        dispatch(options, send, f"{self.klass} jid={options.jid} queue={options.queue} "
                                f"data={str(data)[:500]}", handle)
        return handle


def _put(klass: str, data: dict[str, Any], options: JobOptions, *, delay: Delay | None,
         when: When | None, interval: Delay | None, rate_path: str = "") -> str:
    """Send one job to Redis now; return the handle status."""
    from django_qless.clients import get_client

    # The queue's shard (the alias's one client when it is not sharded): the job, its
    # unique lock and its tracking all live there.
    client = get_client(options.alias).for_queue(options.queue)
    queue = client.queues[options.queue]
    assert options.jid is not None
    if options.rate_limit is not None:
        ensure_kind_limit(client, klass, options.rate_limit,
                          rate_path if options.rate_key else "", options.queue)
    if interval is not None:
        seconds = interval.total_seconds() if isinstance(interval, timedelta) else interval
        queue.recur(klass, data, seconds, offset=options.offset, jid=options.jid,
                    priority=options.priority, tags=options.tags, retries=options.retries,
                    backlog=options.backlog, throttles=options.throttles)
        return "recurring"
    wait = resolve_delay(delay if delay is not None else options.delay, when,
                         now=client.now() if when is not None else None)
    if options.unique in ("skip", "raise_priority"):
        # Serialise producers of the same unique jid, so check-then-put cannot interleave.
        with client.jobs.unique_lock(options.jid, timeout=10, wait=10):
            existing = client.jobs.get(options.jid)
            if existing is not None and existing.state in ACTIVE_STATES:
                if options.unique == "raise_priority" and options.priority > existing.priority:
                    existing.set_priority(options.priority)
                return "skipped" if options.unique == "skip" else "exists"
            _send_put(client, queue, klass, data, options, wait)
        return "enqueued"
    _send_put(client, queue, klass, data, options, wait)
    return "enqueued"


def _send_put(client: Client, queue: Queue, klass: str, data: dict[str, Any], options: JobOptions,
              wait: float) -> None:
    """Put (and track) one job."""
    assert options.jid is not None
    queue.put(klass, data, jid=options.jid, priority=options.priority, tags=options.tags,
              delay=wait, retries=options.retries, depends=options.depends,
              throttles=options.throttles)
    if options.track:
        client.track(options.jid)


def _options_from(kwargs: Mapping[str, Any]) -> JobOptions:
    """Build JobOptions from decorator keyword arguments (retry_on/backoff included)."""
    values = dict(kwargs)
    retry_on = values.pop("retry_on", None)
    backoff = values.pop("backoff", None)
    priority = values.pop("retry_priority", None)
    if retry_on is not None:
        excs = tuple(retry_on) if isinstance(retry_on, Iterable) else (retry_on,)
        if not all(inspect.isclass(e) and issubclass(e, BaseException) for e in excs):
            raise TypeError(f"retry_on must name exception classes, not {retry_on!r}")
        if backoff is None:
            backoff = Backoff.exponential()
        elif isinstance(backoff, int | float):
            backoff = Backoff.fixed(backoff)
        values["retry"] = RetryPolicy(excs, backoff, priority)
    elif backoff is not None or priority is not None:
        given = "backoff" if backoff is not None else "retry_priority"
        raise TypeError(f"{given} needs retry_on: name the exceptions to retry on")
    return JobOptions().merge(values)


class JobFunction(_Sender, Generic[P, R]):
    """A function registered as a job: call it, or enqueue it with ``.enqueue(...)``."""

    def __init__(self, func: Callable[P, R], options: JobOptions, *, name: str | None = None,
                 register: bool = True, limits: Mapping[str, Any] | None = None) -> None:
        if not inspect.isfunction(func) or "<locals>" in func.__qualname__:
            raise TypeError(f"@job needs a module-level function, not {func!r}")
        self.func: Callable[P, R] = func
        self.options = options
        self.klass = name or klass_name_of(func)
        self.signature = inspect.signature(func)
        self.rate_path = DATA_KEY
        if options.rate_key is not None and options.rate_key not in self.signature.parameters:
            raise RateLimitError(f"{self.klass}: rate_key {options.rate_key!r} is not a "
                                 f"parameter of the function")
        self.__wrapped__ = func
        self.__name__ = func.__name__
        self.__qualname__ = func.__qualname__
        self.__module__ = func.__module__
        self.__doc__ = func.__doc__
        if register:
            register_job(self.klass, self.process, **(limits or {}))

    def __repr__(self) -> str:
        return f"<JobFunction {self.klass} queue={self.options.queue!r}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function directly (no queue, no serialisation)."""
        return self.func(*args, **kwargs)

    def using(self, **options: Any) -> JobFunction[P, R]:
        """Return a copy with some options changed (queue, priority, delay, depends, jid...)."""
        clone = JobFunction(self.func, self.options.merge(options), name=self.klass,
                            register=False)
        return clone

    def _data(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        out_args, out_kwargs = encode_arguments(self.klass, self.signature, args, kwargs)
        data: dict[str, Any] = {"args": out_args, "kwargs": out_kwargs}
        if self.options.rate_key is not None:
            data[DATA_KEY] = function_rate_key(self.klass, self.signature,
                                               self.options.rate_key, args, kwargs)
        return data

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Put a job running this function with these arguments."""
        return self._send(self._data(args, kwargs), self.options)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Enqueue from async code (runs ``enqueue`` in the thread that owns the DB)."""
        return await sync_to_async(self.enqueue, thread_sensitive=True)(*args, **kwargs)

    def enqueue_in(self, delay: Delay, /, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Put the job to run after ``delay`` (seconds or a timedelta)."""
        return self._send(self._data(args, kwargs), self.options, delay=delay)

    def enqueue_at(self, when: When, /, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Put the job to run at ``when``: a datetime (naive per USE_TZ) or epoch seconds."""
        return self._send(self._data(args, kwargs), self.options, when=when)

    def recur(self, interval: Delay, /, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Run the job every ``interval``; the jid is derived from the arguments unless given."""
        data = self._data(args, kwargs)
        options = self.options
        if options.jid is None:
            options = options.merge({"jid": "r" + unique_jid(self.klass, data)[:40]})
        return self._send(data, options, interval=interval)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """Return a flow step calling this function; it receives the previous result first."""
        from django_qless.workflows import Signature

        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """Return an immutable flow step: it receives no previous result."""
        from django_qless.workflows import Signature

        return Signature(self, args, kwargs, immutable=True)

    def handle(self, jid: str) -> JobHandle:
        """Return a handle for an earlier enqueue (e.g. to read its result later)."""
        return JobHandle(jid, self.klass, self.options.queue, self.options.alias,
                         status="enqueued")

    def call_with(self, data: Mapping[str, Any]) -> Any:
        """Call the function with the arguments stored in job data."""
        args = data.get("args", [])
        kwargs = data.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise TypeError(f"{self.klass}: job data needs 'args' (list) and 'kwargs' (dict)")
        if inspect.iscoroutinefunction(self.func):
            return async_to_sync(self.func)(*args, **kwargs)
        return self.func(*args, **kwargs)

    def process(self, job: Job) -> Any:
        """Run the job for a worker: call, apply the retry policy, store the return value."""
        return perform_function(self, job)


class JobClass(_Sender):
    """The enqueue API attached to a decorated job class."""

    def __init__(self, cls: type, options: JobOptions, *, name: str | None = None,
                 overrides: Mapping[str, Any] | None = None) -> None:
        self.cls = cls
        self.base_options = options
        self.overrides = dict(overrides or {})
        self.options = options.merge(self.overrides)
        self.klass = name or klass_name_of(cls)

    def _options(self, data: dict[str, Any]) -> JobOptions:
        """Merge decorator options < ``default_job_options(data)`` < ``using()``."""
        hook = getattr(self.cls, "default_job_options", None)
        extra = hook(data) if callable(hook) else None
        if not extra:
            return self.options
        return self.base_options.merge({**dict(extra), **self.overrides})

    def using(self, **options: Any) -> JobClass:
        """Return an enqueuer with some options changed."""
        return JobClass(self.cls, self.base_options, name=self.klass,
                        overrides={**self.overrides, **options})

    def _data(self, data: Mapping[str, Any] | None) -> dict[str, Any]:
        if data is not None and not isinstance(data, Mapping):
            raise InvalidJobArgument(f"{self.klass} job data must be a dict (a JSON object), "
                                     f"got {type(data).__name__}")
        value = to_json(dict(data or {}), f"{self.klass} job data")
        return value  # type: ignore[no-any-return]

    def enqueue(self, data: Mapping[str, Any] | None = None) -> JobHandle:
        """Put a job of this class with ``data``."""
        payload = self._data(data)
        return self._send(payload, self._options(payload))

    def enqueue_in(self, delay: Delay, data: Mapping[str, Any] | None = None) -> JobHandle:
        """Put a job of this class to run after ``delay``."""
        payload = self._data(data)
        return self._send(payload, self._options(payload), delay=delay)

    def enqueue_at(self, when: When, data: Mapping[str, Any] | None = None) -> JobHandle:
        """Put a job of this class to run at ``when`` (a datetime or epoch seconds)."""
        payload = self._data(data)
        return self._send(payload, self._options(payload), when=when)

    def s(self, data: Mapping[str, Any] | None = None) -> Signature:
        """Return a flow step of this class (it reads what it follows with
        ``django_qless.core.flows.received(job)``)."""
        from django_qless.workflows import Signature

        return Signature(self, (data,) if data is not None else ())

    def si(self, data: Mapping[str, Any] | None = None) -> Signature:
        """Return an immutable flow step of this class."""
        from django_qless.workflows import Signature

        return Signature(self, (data,) if data is not None else (), immutable=True)

    def recur(self, interval: Delay, data: Mapping[str, Any] | None = None) -> JobHandle:
        """Run a job of this class every ``interval``."""
        payload = self._data(data)
        options = self._options(payload)
        if options.jid is None:
            options = options.merge({"jid": "r" + unique_jid(self.klass, payload)[:40]})
        return self._send(payload, options, interval=interval)


def _decorate_class(cls: C, options: JobOptions, name: str | None,
                    limits: Mapping[str, Any]) -> C:
    enqueuer = JobClass(cls, options, name=name)
    for attr in ("enqueue", "enqueue_in", "enqueue_at", "recur", "using", "s", "si"):
        setattr(cls, attr, getattr(enqueuer, attr))
    cls.qless_job = enqueuer  # type: ignore[attr-defined]
    register_job(enqueuer.klass, cls, **limits)
    return cls


class _JobDecorator:
    """The result of ``@job(...)`` with arguments."""

    def __init__(self, options: JobOptions, name: str | None,
                 cron: dict[str, Any] | None = None,
                 limits: Mapping[str, Any] | None = None) -> None:
        self.options = options
        self.name = name
        self.cron = cron  # @job(cron=...): a schedule to declare (schedules.py)
        # @job(timeout=..., soft_timeout=...): the kind's time limits, kept in the registry
        self.limits = dict(limits or {})

    @overload
    def __call__(self, target: C) -> C: ...  # type: ignore[overload-overlap]

    @overload
    def __call__(self, target: Callable[P, R]) -> JobFunction[P, R]: ...

    def __call__(self, target: Any) -> Any:
        made: Any
        job_of: Any
        if inspect.isclass(target):
            made = _decorate_class(target, self.options, self.name, self.limits)
            job_of = made.qless_job
        else:
            made = job_of = JobFunction(target, self.options, name=self.name,
                                        limits=self.limits)
        if self.cron is not None:
            declare(job_of, self.cron)
        return made


@overload
def job(target: C, /) -> C: ...  # type: ignore[overload-overlap]


@overload
def job(target: Callable[P, R], /) -> JobFunction[P, R]: ...


@overload
def job(*, queue: str = ..., priority: int = ..., tags: Iterable[str] = ...,
        retries: int = ..., delay: Delay = ..., throttles: Iterable[str] = ...,
        unique: bool | str | None = ..., client: str | None = ...,
        commit_mode: str | None = ..., on_commit: bool | None = ...,
        retry_on: Iterable[type[BaseException]] | type[BaseException] | None = ...,
        backoff: Backoff | float | None = ..., retry_priority: RetryPriority | None = ...,
        track: bool = ..., name: str | None = ..., cron: str = ..., timezone: str = ...,
        missed: str = ..., catchup: int = ..., grace: int = ..., rate_limit: str | None = ...,
        rate_key: str | None = ..., timeout: Delay | None = ...,
        soft_timeout: Delay | None = ..., **options: Any) -> _JobDecorator: ...


def job(target: Any = None, /, *, name: str | None = None, **options: Any) -> Any:
    """Register a function or class as a job; usable bare (``@job``) or called.

    ``cron=`` (with ``timezone``, ``missed``, ``catchup``, ``grace``) also declares a cron
    schedule running it (docs/scheduling.md); ``timeout`` and ``soft_timeout`` are the time
    limits of its jobs, over the worker's ``--timeout`` (docs/worker.md)."""
    cron = pop_cron_options(options)
    limits = {key: options.pop(key) for key in KIND_LIMITS if key in options}
    TimeLimits.of(**limits)  # refused here, at the decorator
    decorator = _JobDecorator(_options_from(options), name, cron, limits)
    if target is None:
        return decorator
    return decorator(target)


def enqueue(target: Any, /, *args: Any, **kwargs: Any) -> JobHandle:
    """Enqueue a ``@job`` function (with its arguments) or job class (with its data dict)."""
    if isinstance(target, JobFunction):
        return target.enqueue(*args, **kwargs)
    enqueuer = getattr(target, "qless_job", None)
    if isinstance(enqueuer, JobClass):
        return enqueuer.enqueue(*args, **kwargs)
    raise TypeError(f"enqueue() needs a @job function or class, not {target!r}")
