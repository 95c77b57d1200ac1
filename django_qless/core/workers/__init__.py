"""The Django-free worker: serial (in-process) and forking (supervisor + children).

Entry points: `run_worker(config, hooks)` (what the CLI and the Django command call),
`make_worker`, `SerialWorker`, `ForkingWorker`, `WorkerConfig`, `WorkerHooks`;
`JobContextFilter` adds the running job's jid to log records.
"""

from __future__ import annotations

from django_qless.core.workers.forking import ForkingWorker
from django_qless.core.workers.hooks import CompositeHooks, WorkerHooks, WorkerHooksProtocol
from django_qless.core.workers.joblog import JobContextFilter, current_job
from django_qless.core.workers.run import import_modules, make_worker, run_worker
from django_qless.core.workers.runner import JobAborted
from django_qless.core.workers.sandbox import current_sandbox
from django_qless.core.workers.serial import SerialWorker
from django_qless.core.workers.shutdown import ExitCode
from django_qless.core.workers.worker_config import WorkerConfig, default_worker_name

__all__ = [
    "CompositeHooks",
    "ExitCode",
    "ForkingWorker",
    "JobAborted",
    "JobContextFilter",
    "SerialWorker",
    "WorkerConfig",
    "WorkerHooks",
    "WorkerHooksProtocol",
    "current_job",
    "current_sandbox",
    "default_worker_name",
    "import_modules",
    "make_worker",
    "run_worker",
]
