"""The Django-free worker: serial (in-process) and forking (supervisor + children).

Entry points: `run_worker(config, hooks)`, which both command lines call, and `make_worker`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from django_qless.core.workers.cli import import_modules, make_worker, run_worker
from django_qless.core.workers.runner import (
    CompositeHooks,
    JobContextFilter,
    WorkerHooks,
    WorkerHooksProtocol,
    current_job,
    current_sandbox,
)
from django_qless.core.workers.shutdown import ExitCode, JobAborted
from django_qless.core.workers.worker_config import WorkerConfig, default_worker_name

if TYPE_CHECKING:
    from django_qless.core.workers.forking import ForkingWorker
    from django_qless.core.workers.serial import SerialWorker

__all__ = ["CompositeHooks", "ExitCode", "ForkingWorker", "JobAborted", "JobContextFilter",
           "SerialWorker", "WorkerConfig", "WorkerHooks", "WorkerHooksProtocol", "current_job",
           "current_sandbox", "default_worker_name", "import_modules", "make_worker",
           "run_worker"]


def __getattr__(name: str) -> Any:
    """Load a worker class on first use: a serial worker needs none of the forking code."""
    if name not in ("ForkingWorker", "SerialWorker"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{name[:-6].lower()}"), name)
