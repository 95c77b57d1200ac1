"""`client.jobs.wait`: block until a job finishes, woken by the engine's events, never polling."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from django_qless.core import Client, WaitTimeout
from django_qless.core.exceptions import InvalidArgument, JobNotFound


def engine_calls(r: redis.Redis) -> int:
    """Count the engine calls the server has run so far (FCALL or EVALSHA)."""
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval"))


def finish_later(client: Client, queue: str, delay: float, *,
                 fail: bool = False) -> threading.Thread:
    """Pop the queue's job and complete (or fail) it after `delay` s, in a thread (started;
    join it before the test ends: the waiter may wake before the call has read its reply)."""

    def run() -> None:
        time.sleep(delay)
        job = client.queues[queue].pop()
        assert job is not None
        if fail:
            job.fail("shop.Boom", "boom 7")
        else:
            job.complete()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_finished_job_is_returned_at_once(client: Client) -> None:
    """A complete job needs no wait."""
    jid = client.queues["q"].put("shop.Job", {})
    client.queues["q"].pop().complete()
    assert client.jobs.wait(jid, timeout=0).state == "complete"


def test_the_wait_ends_when_another_worker_completes_the_job(client: Client) -> None:
    """The completion event wakes the waiter well before any periodic re-read."""
    jid = client.queues["q"].put("shop.Job", {"n": 1})
    thread = finish_later(client, "q", 0.3)
    started = time.monotonic()
    job = client.jobs.wait(jid, timeout=20)
    assert job.state == "complete"
    assert 0.25 < time.monotonic() - started < 5
    thread.join(timeout=10)


def test_a_failure_ends_the_wait_too(client: Client) -> None:
    """A failed job is returned, with its failure."""
    jid = client.queues["q"].put("shop.Job", {})
    thread = finish_later(client, "q", 0.2, fail=True)
    job = client.jobs.wait(jid, timeout=20)
    assert job.state == "failed" and job.failure["message"] == "boom 7"
    thread.join(timeout=10)


def test_the_wait_reads_the_job_only_when_an_event_names_it(client: Client,
                                                            r: redis.Redis) -> None:
    """Waiting 1.5 s on a job nobody works costs one engine call, not a polling loop."""
    jid = client.queues["q"].put("shop.Job", {})
    other = client.queues["other"].put("shop.Job", {})
    before = engine_calls(r)
    with pytest.raises(WaitTimeout, match=f"job {jid} did not finish in time"):
        client.jobs.wait(jid, timeout=1.5)
    calls = engine_calls(r) - before
    assert calls == 1, f"{calls} engine calls while waiting"
    assert other  # an event about another job would not wake it either


def test_a_job_canceled_while_waited_on_says_so(client: Client) -> None:
    """The cancel's event wakes the waiter, which finds the job gone."""
    jid = client.queues["q"].put("shop.Job", {})

    def cancel() -> None:
        time.sleep(0.2)
        client.jobs[jid].cancel()

    thread = threading.Thread(target=cancel, daemon=True)
    thread.start()
    with pytest.raises(JobNotFound, match="canceled, expired or never put"):
        client.jobs.wait(jid, timeout=20)
    thread.join(timeout=10)


def test_bad_input_is_refused(client: Client) -> None:
    """A bad jid or timeout is refused before anything is sent."""
    with pytest.raises(InvalidArgument):
        client.jobs.wait("", timeout=1)
    with pytest.raises(InvalidArgument, match="timeout must be >= 0"):
        client.jobs.wait("abc", timeout=-1)
    with pytest.raises(JobNotFound):
        client.jobs.wait("nosuch", timeout=1)
