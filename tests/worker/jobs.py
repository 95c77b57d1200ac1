"""Job targets used by the worker tests (imported by workers with `--import tests.worker.jobs`).

Every job appends to a ledger list `test:ledger` (outside the ql:* keys) so tests can count
starts and finishes per jid independently of the engine's own records.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

from django_qless.core.job import Job
from django_qless.core.registry import default_registry, register

__all__ = ["LEDGER", "ledger"]

LEDGER = "test:ledger"


def note(job: Job, event: str, **extra: Any) -> None:
    """Append one ledger entry for this job."""
    entry = {"jid": job.jid, "event": event, "pid": os.getpid(), "worker": job.worker_name,
             "t": time.time(), **extra}
    job.client.redis.rpush(LEDGER, json.dumps(entry))


def ledger(conn: Any, event: str | None = None, jid: str | None = None) -> list[dict[str, Any]]:
    """Return ledger entries, optionally filtered."""
    rows = [json.loads(x) for x in conn.lrange(LEDGER, 0, -1)]
    return [r for r in rows if (event is None or r["event"] == event)
            and (jid is None or r["jid"] == jid)]


@register()
def ok(job: Job) -> None:
    """Record a start and a finish."""
    note(job, "started")
    note(job, "done")


@register()
def noop(job: Job) -> None:
    """Do nothing (throughput measurements)."""


@register()
def brief(job: Job) -> None:
    """Take 2 ms (short enough for the worker to hold the next job ahead), then record it."""
    time.sleep(0.002)
    note(job, "done")


@register()
def ping(job: Job) -> None:
    """Push the start time to `test:pings` (a test blocks on it instead of polling)."""
    job.client.redis.rpush("test:pings", json.dumps([job.jid, time.time()]))


@register()
def sleepy(job: Job) -> None:
    """Sleep data['seconds'] (in small steps, so aborts land promptly)."""
    note(job, "started")
    end = time.monotonic() + float(job.data.get("seconds", 1))
    while time.monotonic() < end:
        time.sleep(0.01)
    note(job, "done")


@register()
def spin(job: Job) -> None:
    """Compute for data['seconds'] without a blocking call, then record start and end."""
    start = time.time()
    end = time.monotonic() + float(job.data.get("seconds", 1))
    while time.monotonic() < end:
        pass
    note(job, "spun", start=start, end=time.time())


@register()
def sleep_long(job: Job) -> None:
    """One long blocking sleep (an abort must interrupt it, not wait for it)."""
    note(job, "started")
    time.sleep(float(job.data.get("seconds", 30)))
    note(job, "done")


@register()
def cancel_self(job: Job) -> None:
    """Cancel itself as it starts, then sleep: only the supervisor's kill ends it early."""
    job.cancel()
    note(job, "started")
    time.sleep(float(job.data.get("seconds", 30)))
    note(job, "done")


@register()
def quit_while_abort_comes(job: Job) -> None:
    """Be canceled, then take a QUIT while the abort that causes is still on its way.

    The job thread blocks URG (how an abort reaches it) and sleeps four seconds; other threads
    cancel the job after half a second and send QUIT after one, while the abort is pending.
    """
    note(job, "started")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGURG})
    threading.Timer(0.5, job.cancel).start()
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGQUIT)).start()
    try:
        time.sleep(4.0)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGURG})
    note(job, "done")


@register()
def lose_lock_once(job: Job) -> None:
    """First run: someone else takes the lock (timeout) while we work; then we return."""
    note(job, "started")
    if job.client.redis.set(f"test:once:{job.jid}", 1, nx=True):
        job.client.jobs[job.jid].timeout()
        time.sleep(0.2)  # the lock_lost event is on its way to the worker
    note(job, "done")


@register()
def boom(job: Job) -> None:
    """Raise ValueError."""
    note(job, "started")
    raise ValueError(f"boom {job.data.get('n', '')}")


@register()
def suicide(job: Job) -> None:
    """SIGKILL the process running the job (a poison job)."""
    note(job, "started")
    os.kill(os.getpid(), signal.SIGKILL)


@register()
def sandboxed(job: Job) -> None:
    """Write a file into the job's sandbox and record the path."""
    from django_qless.core.workers import current_sandbox

    path = job.sandbox
    assert path == current_sandbox()
    assert path is not None and os.path.isdir(path)
    with open(os.path.join(path, "scratch.txt"), "w") as fh:
        fh.write("x")
    note(job, "done", sandbox=path, listed=os.listdir(path))


@register()
def self_complete(job: Job) -> None:
    """Complete the job itself (the worker must not complete it again)."""
    job.complete()
    note(job, "done")


@register()
def self_retry(job: Job) -> None:
    """Hand the job back with retry (the worker must leave it alone)."""
    note(job, "started")
    job.retry(delay=0, group="tests.Retry", message="again")


@register("tests.worker.jobs.Routed")
class Routed:
    """A qless-style class: a static method named after the queue wins over process()."""

    @staticmethod
    def special(job: Job) -> None:
        note(job, "done", via="special")

    @staticmethod
    def process(job: Job) -> None:
        note(job, "done", via="process")


def tagging(job: Job, call_next: Any) -> Any:
    """Per-job middleware: records that it ran around the job."""
    note(job, "mw-before")
    result = call_next()
    note(job, "mw-after")
    return result


default_registry.register("tests.worker.jobs.wrapped", ok, middleware=[tagging])
