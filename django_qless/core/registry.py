"""Which job classes a worker may run.

A job's `klass` comes from Redis, so anyone who can write to Redis chooses it. The worker
therefore treats it as a *lookup key*: it runs only targets registered here, or classes and
functions found under module prefixes the operator allowed explicitly. A name outside both is
refused with `UnregisteredJobClass` and is never imported.

A target is either a qless-style job class (a static or class method named after the queue,
if the class itself defines one, else `process(job)`) or a plain callable `handler(job)`.

A registered name may carry its kind's time limits (`timeout`, `soft_timeout`): the worker
reads them here, where it looks the job up anyway, so they cost no Redis call.
"""

from __future__ import annotations

import importlib
import inspect
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from django_qless.core.exceptions import InvalidArgument, UnregisteredJobClass

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = [
    "Handler",
    "Middleware",
    "NO_LIMITS",
    "UNKNOWN_JOB_GROUP",
    "Registry",
    "RegisteredJob",
    "TimeLimits",
    "default_registry",
    "klass_name_of",
    "register",
]

Handler = Callable[["Job"], Any]
# An around-perform callable: mw(job, call_next) -> result; call_next() runs the rest.
Middleware = Callable[["Job", Callable[[], Any]], Any]
T = TypeVar("T")

# The failure group of a job whose klass the worker refuses to run.
UNKNOWN_JOB_GROUP = "django_qless.UnknownJob"
_MAX_NAME = 256


def klass_name_of(target: object) -> str:
    """Return the `module.QualName` a class or function is known by in Redis."""
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    if not module or not qualname:
        raise TypeError(f"cannot name {target!r}: give the registry an explicit name")
    return f"{module}.{qualname}"


def _queue_method(cls: type, queue: str | None) -> Callable[..., Any] | None:
    """Return the static/class method named after `queue` if the class itself defines it."""
    if not queue or not queue.isidentifier() or queue.startswith("_"):
        return None
    # Only attributes written in the class body (or a base's) count, and only static or
    # class methods: a queue name must not be able to reach __init__, mro or properties.
    for klass in cls.__mro__:
        if klass is object:
            break
        raw = vars(klass).get(queue)
        if isinstance(raw, (staticmethod, classmethod)):
            return getattr(cls, queue)  # type: ignore[no-any-return]
        if raw is not None:
            return None
    return None


def _seconds(name: str, value: object) -> float:
    """Return a limit as positive seconds (a number or a timedelta), or raise InvalidArgument."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgument(f"{name} must be a number of seconds or a timedelta, "
                              f"got {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgument(f"{name} must be a positive number of seconds, got {value!r}")
    return float(seconds)


@dataclass(frozen=True)
class TimeLimits:
    """How long a job may run, in seconds (0: no limit).

    `hard` stops the job (serial: `JobAborted` raised in it; forking: TERM, then KILL after
    --kill-grace) and fails it as `django_qless.JobTimeout`; `soft` raises
    `SoftTimeLimitExceeded` inside it first, so it can clean up.
    """

    hard: float = 0.0
    soft: float = 0.0

    @classmethod
    def of(cls, timeout: float | timedelta | None = None,
           soft_timeout: float | timedelta | None = None) -> TimeLimits:
        """Check a job kind's limits (positive seconds or timedeltas, soft below hard)."""
        hard = 0.0 if timeout is None else _seconds("timeout", timeout)
        soft = 0.0 if soft_timeout is None else _seconds("soft_timeout", soft_timeout)
        if hard and soft and soft >= hard:
            raise InvalidArgument(f"soft_timeout ({soft:g}s) must be shorter than timeout "
                                  f"({hard:g}s): the soft limit warns the job before the hard "
                                  "one stops it")
        return cls(hard, soft)

    def over(self, default: TimeLimits) -> TimeLimits:
        """Return these limits, with the worker's (`default`) hard limit if none is set."""
        if self.hard or not default.hard:
            return self
        return TimeLimits(default.hard, self.soft) if self.soft else default


NO_LIMITS = TimeLimits()


@dataclass(frozen=True)
class RegisteredJob:
    """A registry entry: the target, the per-job middleware around it, its time limits."""

    name: str
    target: object
    middleware: tuple[Middleware, ...] = field(default=())
    limits: TimeLimits = NO_LIMITS

    def handler(self, queue: str | None = None) -> Handler:
        """Return the callable that performs a job of this class popped from `queue`."""
        target = self.target
        if inspect.isclass(target):
            method = _queue_method(target, queue)
            if method is not None:
                return method
            process = getattr(target, "process", None)
            if process is None or not callable(process):
                raise UnregisteredJobClass(
                    f"{self.name!r} has no process(job) method and no method for queue {queue!r}"
                )
            if isinstance(inspect.getattr_static(target, "process"), (staticmethod, classmethod)):
                return process  # type: ignore[no-any-return, unused-ignore]
            # A plain method: make an instance per job (qless-py called it on the class).
            return lambda job: getattr(target(), "process")(job)  # noqa: B009
        if callable(target):
            return target
        raise UnregisteredJobClass(f"{self.name!r} is registered with a non-callable target")

    def perform(self, job: Job) -> Any:
        """Run the job's target (no middleware)."""
        return self.handler(job.queue_name)(job)


class Registry:
    """Map klass names to job targets; import only under explicitly allowed module prefixes."""

    def __init__(self, *, allow_module_prefixes: Iterable[str] = ()) -> None:
        self._entries: dict[str, RegisteredJob] = {}
        self._prefixes: list[str] = []
        self._lock = threading.Lock()
        self._hint: Callable[[str], str | None] | None = None
        self.allow_module_prefixes(*allow_module_prefixes)

    # -- registration -------------------------------------------------------------------
    def register(
        self,
        name: str | None,
        target: T,
        *,
        middleware: Sequence[Middleware] = (),
        replace: bool = False,
        timeout: float | timedelta | None = None,
        soft_timeout: float | timedelta | None = None,
    ) -> T:
        """Register `target` under `name` (default: its `module.QualName`); return the target.

        `timeout` and `soft_timeout` (seconds or timedelta) are this kind's time limits; a
        worker's --timeout applies where `timeout` is not given.
        """
        key = klass_name_of(target) if name is None else name
        if not isinstance(key, str) or not key or len(key) > _MAX_NAME:
            raise ValueError(f"job name must be 1-{_MAX_NAME} characters: {key!r}")
        if not (inspect.isclass(target) or callable(target)):
            raise TypeError(f"job target must be a class or a callable: {target!r}")
        limits = TimeLimits.of(timeout, soft_timeout)
        entry = RegisteredJob(key, target, tuple(middleware), limits)
        with self._lock:
            old = self._entries.get(key)
            if old is not None and old.target is not target and not replace:
                raise ValueError(f"job name {key!r} is already registered to {old.target!r}")
            self._entries[key] = entry
        return target

    def job(
        self, name: str | None = None, *, middleware: Sequence[Middleware] = (),
        timeout: float | timedelta | None = None, soft_timeout: float | timedelta | None = None,
    ) -> Callable[[T], T]:
        """Return a decorator registering a class or function (`@registry.job()`)."""
        TimeLimits.of(timeout, soft_timeout)  # refused at the decorator, not at its use

        def decorate(target: T) -> T:
            return self.register(name, target, middleware=middleware, timeout=timeout,
                                 soft_timeout=soft_timeout)

        return decorate

    def unregister(self, name: str) -> None:
        """Forget a registered name (tests, reloading)."""
        with self._lock:
            self._entries.pop(name, None)

    def allow_module_prefixes(self, *prefixes: str) -> None:
        """Allow importing job classes whose dotted name lies under one of these modules."""
        for prefix in prefixes:
            clean = prefix.strip().rstrip(".")
            if not clean or not all(part.isidentifier() for part in clean.split(".")):
                raise ValueError(f"not a module prefix: {prefix!r}")
            with self._lock:
                if clean not in self._prefixes:
                    self._prefixes.append(clean)

    def set_unknown_hint(self, hint: Callable[[str], str | None] | None) -> None:
        """Add ``hint(klass_name)`` (when not None) to the error of an unregistered name."""
        self._hint = hint

    def _unknown(self, klass_name: str) -> UnregisteredJobClass:
        message = f"{klass_name!r} is not a registered job"
        hint = self._hint(klass_name) if self._hint is not None else None
        return UnregisteredJobClass(f"{message}: {hint}" if hint else message)

    @property
    def module_prefixes(self) -> tuple[str, ...]:
        """Return the allowed module prefixes."""
        return tuple(self._prefixes)

    def names(self) -> list[str]:
        """Return the registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    # -- lookup ---------------------------------------------------------------------------
    def is_allowed(self, klass_name: str) -> bool:
        """Tell whether `klass_name` is registered or lies under an allowed module prefix."""
        return klass_name in self._entries or self._under_prefix(klass_name)

    def _under_prefix(self, klass_name: str) -> bool:
        return any(
            klass_name.startswith(prefix + ".") and len(klass_name) > len(prefix) + 1
            for prefix in self._prefixes
        )

    def resolve(self, klass_name: str) -> RegisteredJob:
        """Return the entry for `klass_name`, or raise `UnregisteredJobClass` (never import)."""
        entry = self._entries.get(klass_name)
        if entry is not None:
            return entry
        if not isinstance(klass_name, str) or not self._under_prefix(klass_name):
            raise self._unknown(klass_name)
        try:
            target = self._import(klass_name)
        except UnregisteredJobClass:
            # Importing the module may have registered the name itself (a decorated job).
            entry = self._entries.get(klass_name)
            if entry is None:
                raise
            return entry
        entry = RegisteredJob(klass_name, target)
        with self._lock:
            self._entries.setdefault(klass_name, entry)
        return self._entries[klass_name]

    def _import(self, klass_name: str) -> object:
        """Import `module.QualName` (the name is already known to lie under a prefix)."""
        parts = klass_name.split(".")
        if not all(part.isidentifier() and not part.startswith("_") for part in parts):
            raise UnregisteredJobClass(f"{klass_name!r} is not a valid job name")
        # Longest importable module first; the rest is the qualified name inside it.
        for cut in range(len(parts) - 1, 0, -1):
            module_name = ".".join(parts[:cut])
            if not any(
                module_name == p or module_name.startswith(p + ".") for p in self._prefixes
            ):
                # The module itself must lie under a prefix: a prefix "app.jobs" does not let
                # "app.jobs_evil" or a parent module be imported.
                continue
            try:
                obj: object = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name is not None and module_name.startswith(exc.name):
                    continue
                raise UnregisteredJobClass(f"{klass_name!r}: import failed: {exc}") from exc
            except Exception as exc:
                raise UnregisteredJobClass(f"{klass_name!r}: import failed: {exc}") from exc
            for attr in parts[cut:]:
                obj = getattr(obj, attr, None)
                if obj is None:
                    break
            if obj is not None and (inspect.isclass(obj) or inspect.isfunction(obj)):
                return obj
            break
        raise UnregisteredJobClass(f"{klass_name!r} is not a registered job")


default_registry = Registry()


def register(
    name: str | None = None, *, middleware: Sequence[Middleware] = (),
    timeout: float | timedelta | None = None, soft_timeout: float | timedelta | None = None,
) -> Callable[[T], T]:
    """Register a class or function in the default registry (decorator)."""
    return default_registry.job(name, middleware=middleware, timeout=timeout,
                                soft_timeout=soft_timeout)
