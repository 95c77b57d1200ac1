"""Jobs used by the tests (autodiscovered: tests.app is an installed app)."""

from __future__ import annotations

import datetime
import decimal
import os
import time
from typing import Any

from django_qless import SoftTimeLimitExceeded, job
from django_qless.core.registry import default_registry
from django_qless.decorators import Backoff


class Flaky(Exception):
    """A retryable error."""


@job
def add(a: int, b: int = 0) -> int:
    """Return a + b."""
    return a + b


@job(queue="emails", priority=10, tags=["mail"], retries=3)
def send_mail(to: str, *, subject: str = "hi") -> str:
    """Pretend to send a mail."""
    return f"sent {subject} to {to}"


@job(queue="other")
def echo(value: Any) -> Any:
    """Return the argument as the job received it (after JSON)."""
    return value


@job
def kinds(when: datetime.datetime, amount: decimal.Decimal) -> list[str]:
    """Return what the arguments became."""
    return [type(when).__name__, type(amount).__name__, str(when), str(amount)]


@job
def boom(message: str = "boom") -> None:
    """Always fail."""
    raise ValueError(message)


@job(retries=3, retry_on=[Flaky], backoff=Backoff.fixed(0))
def flaky(fail_times: int, key: str) -> str:
    """Fail with Flaky the first `fail_times` attempts (counted in a file)."""
    path = os.path.join(os.environ.get("QLESS_TEST_TMP", "/tmp"), f"flaky-{key}")
    count = 0
    if os.path.exists(path):
        with open(path) as fh:
            count = int(fh.read())
    with open(path, "w") as fh:
        fh.write(str(count + 1))
    if count < fail_times:
        raise Flaky(f"attempt {count + 1}")
    return f"ok after {count + 1}"


@job(retries=2, retry_on=Flaky, backoff=30)
def always_flaky() -> None:
    """Always raise Flaky (retried with a 30 s fixed backoff)."""
    raise Flaky("again")


@job(queue="runner", retries=2, retry_on=Flaky, backoff=0)
def runner_probe(attempt: int = 0, via: str = "") -> dict[str, Any]:
    """Fail the first attempt; return what the per-job middleware passed in."""
    if attempt < 2:
        raise Flaky(f"attempt {attempt}")
    return {"attempt": attempt, "via": via}


def _probe_middleware(job: Any, call_next: Any) -> Any:
    """Pass the attempt number and a mark that only the runner's middleware chain adds."""
    job.data["kwargs"].update(attempt=job.original_retries - job.retries + 1, via="middleware")
    return call_next()


default_registry.register(runner_probe.klass, runner_probe.process,
                          middleware=(_probe_middleware,), replace=True)


@job(unique=True)
def dedupe(key: str) -> str:
    """A unique job: one active per argument set."""
    return key


@job
async def async_add(a: int, b: int) -> int:
    """An async job."""
    return a + b


@job
def slow(seconds: float) -> float:
    """Sleep."""
    time.sleep(seconds)
    return seconds


@job(queue="classes", priority=3)
class Thumbnail:
    """A qless-style class job."""

    @staticmethod
    def process(job: Any) -> None:
        job.data["size"] = job.data.get("width", 0) * 2

    @staticmethod
    def classes(job: Any) -> None:
        job.data["via"] = "queue method"

    @classmethod
    def default_job_options(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {"tags": ["thumb", f"w{data.get('width', 0)}"]}


@job(queue="limits", timeout=30, soft_timeout=1)
def tidy_up(steps: int) -> str:
    """Work in steps; at the soft limit stop cleanly and say how far it got."""
    done = 0
    try:
        while done < steps:
            time.sleep(0.05)
            done += 1
    except SoftTimeLimitExceeded:
        return f"stopped cleanly after {done} steps"
    return "finished"


@job(queue="limits", timeout=datetime.timedelta(seconds=1))
class Overrun:
    """A class job that runs past its kind's limit."""

    @staticmethod
    def process(job: Any) -> None:
        time.sleep(30)


@job
def db_query() -> int:
    """Use the ORM's connection in the worker; return this process's pid."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM sqlite_master")
        cursor.fetchone()
    return os.getpid()


def _record(name: str, **fields: Any) -> None:
    """Append one signal to $QLESS_TEST_SIGNAL_LOG (worker-side signal tests)."""
    import json

    path = os.environ.get("QLESS_TEST_SIGNAL_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"signal": name, "pid": os.getpid(), **fields}) + "\n")


def _connect_recorders() -> None:
    from django_qless import signals

    def started(sender: str, event: Any, **kw: Any) -> None:
        _record("job_started", sender=sender, jid=event.jid, worker=event.worker,
                attempt=event.attempt, klass=event.klass)

    def finished(sender: str, event: Any, **kw: Any) -> None:
        _record("job_finished", sender=sender, jid=event.jid, outcome=event.outcome,
                worker=event.worker, group=event.group)

    def worker_started(sender: str, worker: Any, **kw: Any) -> None:
        _record("worker_started", sender=sender, worker=worker.name)

    def worker_stopped(sender: str, worker: Any, **kw: Any) -> None:
        _record("worker_stopped", sender=sender, worker=worker.name)

    for sig, fn in ((signals.job_started, started), (signals.job_finished, finished),
                    (signals.worker_started, worker_started),
                    (signals.worker_stopped, worker_stopped)):
        sig.connect(fn, weak=False, dispatch_uid=f"tests.{fn.__name__}")


_connect_recorders()
