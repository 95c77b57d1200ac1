"""django-qless: a qless-compatible Redis job queue for Django.

The Django-facing names are re-exported lazily, so ``import django_qless`` (and the core
package) never imports Django.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "job": "django_qless.decorators",
    "JobFunction": "django_qless.decorators",
    "Backoff": "django_qless.options",
    "RetryPolicy": "django_qless.options",
    "JobHandle": "django_qless.options",
    "get_client": "django_qless.clients",
    "get_client_for_queue": "django_qless.clients",
    "client": "django_qless.clients",
    "enqueue": "django_qless.decorators",
    "SoftTimeLimitExceeded": "django_qless.core.exceptions",
}

__all__ = [
    "Backoff",
    "JobFunction",
    "JobHandle",
    "RetryPolicy",
    "SoftTimeLimitExceeded",
    "__version__",
    "client",
    "enqueue",
    "get_client",
    "get_client_for_queue",
    "job",
]

if TYPE_CHECKING:
    from django_qless.clients import client, get_client, get_client_for_queue
    from django_qless.core.exceptions import SoftTimeLimitExceeded
    from django_qless.decorators import JobFunction, enqueue, job
    from django_qless.options import Backoff, JobHandle, RetryPolicy


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'django_qless' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
