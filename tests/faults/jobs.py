"""Jobs for the fault tests (workers load them with `--import tests.faults.jobs`).

Each job writes `started` before its work and `done` just before the worker completes it,
into the SQLite ledger named by $QLESS_FAULT_LEDGER (outside Redis, so Redis faults cannot
touch it). Side effects go through an idempotency table keyed by jid.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from typing import Any

from django_qless.core.job import Job
from django_qless.core.registry import register

__all__ = ["note"]

_local = threading.local()


def _db() -> sqlite3.Connection:
    """One connection per thread and process (never shared across fork)."""
    db = getattr(_local, "db", None)
    if db is None or getattr(_local, "pid", None) != os.getpid():
        db = sqlite3.connect(os.environ["QLESS_FAULT_LEDGER"], timeout=60)
        _local.db, _local.pid = db, os.getpid()
    return db


def note(job: Job, event: str, **extra: Any) -> None:
    """Append one ledger row for this job."""
    db = _db()
    with db:
        attempt = db.execute("SELECT COUNT(*) FROM ledger WHERE jid = ? AND event = 'started'",
                             (job.jid,)).fetchone()[0]
        db.execute("INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (job.jid, attempt, job.worker_name, os.getpid(), event, time.time(),
                    json.dumps(extra)))


def effect(job: Job) -> None:
    """Apply the job's side effect once per jid (the idempotency table)."""
    db = _db()
    with db:
        db.execute("INSERT OR IGNORE INTO effects VALUES (?, ?)", (job.jid, os.getpid()))


@register()
def work(job: Job) -> None:
    """Sleep data['seconds'] in small steps (aborts land promptly), apply the effect."""
    note(job, "started")
    end = time.monotonic() + float(job.data.get("seconds", 0))
    while time.monotonic() < end:
        time.sleep(0.01)
    effect(job)
    note(job, "done")


@register()
def suicide(job: Job) -> None:
    """SIGKILL the process running the job."""
    note(job, "started")
    os.kill(os.getpid(), signal.SIGKILL)


@register()
def kill_once(job: Job) -> None:
    """SIGKILL the process on the first attempt only; complete normally afterwards."""
    note(job, "started")
    db = _db()
    runs = db.execute("SELECT COUNT(*) FROM ledger WHERE jid = ? AND event = 'started'",
                      (job.jid,)).fetchone()[0]
    if runs == 1:
        time.sleep(float(job.data.get("seconds", 0)))
        os.kill(os.getpid(), signal.SIGKILL)
    effect(job)
    note(job, "done")
