"""The pure-Python qless client (never imports Django).

Names are re-exported lazily so `python -m django_qless.core.engine.lua` (and any light
import of one submodule) does not load the whole client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .accessors import Config, Queues, Tags, Workers
    from .client import Client
    from .engine.invoke import ServerClock
    from .events import Events
    from .exceptions import (
        ClusterNodeError,
        DependencyError,
        InvalidArgument,
        InvalidStateTransition,
        JobNotFound,
        LimitExceeded,
        LostLockError,
        QlessConnectionError,
        QlessError,
        ScriptError,
        SoftTimeLimitExceeded,
        UnregisteredJobClass,
        error_from_reply,
    )
    from .job import Job
    from .jobs import Jobs
    from .queue import Queue, QueueJobs, QueueSettings
    from .recurring import RecurringJob
    from .serialization import new_jid
    from .throttle import Throttle, ThrottleInfo, Throttles, ThrottleStatus
    from .waiting import WaitTimeout

_EXPORTS = {
    "Client": "client", "Tags": "accessors", "Workers": "accessors",
    "ServerClock": "engine.invoke",
    "Config": "accessors",
    "Events": "events",
    "ClusterNodeError": "exceptions", "DependencyError": "exceptions",
    "InvalidArgument": "exceptions",
    "InvalidStateTransition": "exceptions", "JobNotFound": "exceptions",
    "LimitExceeded": "exceptions", "LostLockError": "exceptions",
    "QlessConnectionError": "exceptions", "QlessError": "exceptions",
    "ScriptError": "exceptions", "SoftTimeLimitExceeded": "exceptions",
    "UnregisteredJobClass": "exceptions",
    "error_from_reply": "exceptions",
    "Job": "job",
    "Jobs": "jobs",
    "Queue": "queue", "QueueJobs": "queue", "QueueSettings": "queue", "Queues": "accessors",
    "RecurringJob": "recurring",
    "new_jid": "serialization",
    "Throttle": "throttle", "ThrottleInfo": "throttle", "Throttles": "throttle",
    "ThrottleStatus": "throttle",
    "WaitTimeout": "waiting",
}

__all__ = [
    "Client",
    "ClusterNodeError",
    "WaitTimeout",
    "Config",
    "DependencyError",
    "Events",
    "InvalidArgument",
    "InvalidStateTransition",
    "Job",
    "JobNotFound",
    "Jobs",
    "LimitExceeded",
    "LostLockError",
    "QlessConnectionError",
    "QlessError",
    "Queue",
    "QueueJobs",
    "QueueSettings",
    "Queues",
    "RecurringJob",
    "ScriptError",
    "ServerClock",
    "SoftTimeLimitExceeded",
    "Tags",
    "Throttle",
    "ThrottleInfo",
    "ThrottleStatus",
    "Throttles",
    "UnregisteredJobClass",
    "Workers",
    "error_from_reply",
    "new_jid",
]


def __getattr__(name: str) -> Any:
    """Import a re-exported name on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
