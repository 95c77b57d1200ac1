"""Django signals sent by django-qless (Signal objects only; see bridge.py and hooks.py).

Bridged from Redis pubsub by ``manage.py qless_events`` (``sender`` is the alias name,
keyword arguments ``jid``, ``event`` (the raw payload dict) and ``client``): ``job_put``,
``job_popped``, ``job_completed``, ``job_failed``, ``job_stalled``, ``job_canceled``,
``job_tracked``, ``job_untracked``, ``job_lock_lost``. Delivery is at-most-once and advisory.

Sent in the worker process (``sender`` is the worker name): ``worker_started``,
``worker_stopped`` (keyword ``worker``), ``job_started`` (``job``) and ``job_finished``
(``job``, ``outcome`` = "completed" | "retried" | "failed" | "aborted", ``error``).
"completed" means the job code returned (the worker then completes the job).
"""

from django.dispatch import Signal

__all__ = [
    "BRIDGED_SIGNALS",
    "job_canceled",
    "job_completed",
    "job_failed",
    "job_finished",
    "job_lock_lost",
    "job_popped",
    "job_put",
    "job_stalled",
    "job_started",
    "job_tracked",
    "job_untracked",
    "worker_started",
    "worker_stopped",
]

job_put = Signal()
job_popped = Signal()
job_completed = Signal()
job_failed = Signal()
job_stalled = Signal()
job_canceled = Signal()
job_tracked = Signal()
job_untracked = Signal()
job_lock_lost = Signal()

job_started = Signal()
job_finished = Signal()
worker_started = Signal()
worker_stopped = Signal()

# Event name (the ``event`` key of a payload) -> signal.
BRIDGED_SIGNALS: dict[str, Signal] = {
    "put": job_put,
    "popped": job_popped,
    "completed": job_completed,
    "failed": job_failed,
    "stalled": job_stalled,
    "canceled": job_canceled,
    "track": job_tracked,
    "untrack": job_untracked,
    "lock_lost": job_lock_lost,
}
