"""The Django side of the job registry: autodiscovery and the ``JOB_MODULES`` allowlist.

The worker runs only what the core registry (``django_qless.core.registry``) knows: functions
and classes decorated with ``@job`` (registered at import), plus classes under the modules
listed in ``QLESS["JOB_MODULES"]``. ``setup()`` imports every installed app's ``jobs`` module
(unless ``AUTODISCOVER`` is False) so the decorators run before the first job is taken.
When ``TASKS`` uses django-qless's backend it also imports each app's ``tasks`` module that
defines ``django.tasks`` tasks and registers every task of that backend it finds loaded
(there, in ``<app>.jobs``, or anywhere imported by then) under the task's path.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils.module_loading import autodiscover_modules

from django_qless.conf import get_settings
from django_qless.core.registry import UNKNOWN_JOB_GROUP, Registry, default_registry

__all__ = ["UNKNOWN_JOB_GROUP", "autodiscover", "get_registry", "register_job", "setup",
           "tasks_backend_in_use"]

_lock = threading.Lock()
_done = False


def register_job(name: str, target: Any, *, timeout: float | timedelta | None = None,
                 soft_timeout: float | timedelta | None = None) -> None:
    """Register a job target under its klass name, with its kind's time limits
    (re-registration replaces it)."""
    default_registry.register(name, target, replace=True, timeout=timeout,
                              soft_timeout=soft_timeout)


def autodiscover() -> None:
    """Import ``<app>.jobs`` for every installed app."""
    autodiscover_modules("jobs")


def _tasks_backend_in_use() -> bool:
    tasks = getattr(settings, "TASKS", None) or {}
    return any(
        isinstance(conf, dict) and str(conf.get("BACKEND", "")).startswith("django_qless.")
        for conf in tasks.values()
    )


def tasks_backend_in_use() -> bool:
    """Tell whether a ``TASKS`` backend is django-qless's (workers then run tasks)."""
    return _tasks_backend_in_use()


def _register_tasks(autodiscover: bool) -> None:
    """Import the apps' ``tasks`` modules that define django.tasks tasks; register every
    task of django-qless's backend found in the loaded modules, under its path.

    A task's path is its job's klass; only tasks found here (or enqueued from this
    process) run, so no path read from Redis is ever imported.
    """
    import importlib
    import sys
    from types import ModuleType

    from django_qless.discovery import task_modules
    from django_qless.tasks_backend import register_tasks_in

    for module in task_modules() if autodiscover else ():
        importlib.import_module(module)
    register_tasks_in([m for m in list(sys.modules.values()) if isinstance(m, ModuleType)])


def setup(*, force: bool = False) -> Registry:
    """Autodiscover job modules and apply the allowlist (once per process)."""
    global _done
    with _lock:
        if _done and not force:
            return default_registry
        from django_qless.discovery import unknown_job_hint

        conf = get_settings()
        default_registry.allow_module_prefixes(*conf.job_modules)
        default_registry.set_unknown_hint(unknown_job_hint)
        if conf.autodiscover:
            autodiscover()
        if _tasks_backend_in_use():
            _register_tasks(conf.autodiscover)
        _done = True
    return default_registry


def get_registry() -> Registry:
    """Return the registry a worker should use (set up on first call)."""
    return setup()
