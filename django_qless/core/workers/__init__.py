"""The Django-free worker: serial (in-process) and forking (supervisor + children).

Entry points (`django_qless.core.worker_cli`, loaded on first use): `run_worker(config,
hooks)`, which both command lines call, and `make_worker`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from django_qless.core.worker_options import WorkerConfig, default_worker_name
from django_qless.core.workers.runner import (
    CompositeHooks,
    JobContextFilter,
    Outcome,
    WorkerHooks,
    WorkerInfo,
    current_job,
    current_sandbox,
)
from django_qless.core.workers.shutdown import ExitCode, JobAborted

if TYPE_CHECKING:
    from django_qless.core.worker_cli import import_modules, make_worker, run_worker
    from django_qless.core.workers.forking import ForkingWorker
    from django_qless.core.workers.serial import SerialWorker

# Loaded on first use: the start-up imports this package, and a serial worker needs none of
# the forking code.
_LAZY = {"ForkingWorker": "django_qless.core.workers.forking",
         "SerialWorker": "django_qless.core.workers.serial",
         **dict.fromkeys(("import_modules", "make_worker", "run_worker"),
                         "django_qless.core.worker_cli")}

__all__ = ["CompositeHooks", "ExitCode", "ForkingWorker", "JobAborted", "JobContextFilter",
           "Outcome", "SerialWorker", "WorkerConfig", "WorkerHooks",
           "WorkerInfo", "current_job", "current_sandbox", "default_worker_name",
           "import_modules", "make_worker", "run_worker"]


def __getattr__(name: str) -> Any:
    """Load a worker class or an entry point on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
