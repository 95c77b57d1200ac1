"""Unique jobs (jid from function + arguments) and retry policies with backoff."""

from __future__ import annotations

import pytest

from django_qless.options import Backoff, JobOptions, unique_jid
from django_qless.testing import run_queued
from tests.app import jobs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def flaky_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("QLESS_TEST_TMP", str(tmp_path))
    return tmp_path


def test_unique_jid_depends_on_function_and_arguments():
    a = unique_jid("m.f", {"args": [1], "kwargs": {"x": 1, "y": 2}})
    assert a == unique_jid("m.f", {"kwargs": {"y": 2, "x": 1}, "args": [1]})
    assert a != unique_jid("m.g", {"args": [1], "kwargs": {"x": 1, "y": 2}})
    assert a != unique_jid("m.f", {"args": [2], "kwargs": {"x": 1, "y": 2}})
    assert len(a) == 40


def test_skip_policy_keeps_one_active_job(r):
    first = jobs.dedupe.enqueue("k")
    second = jobs.dedupe.enqueue("k")
    other = jobs.dedupe.enqueue("other")
    assert first.jid == second.jid != other.jid
    assert (first.status, second.status, other.status) == ("enqueued", "skipped", "enqueued")
    assert len(first.client.queues["default"].jobs.waiting()) == 2
    run_queued()
    again = jobs.dedupe.enqueue("k")  # the completed one does not block a new run
    assert again.status == "enqueued" and again.state() == "waiting"


def test_replace_policy_re_puts_the_job():
    unique = jobs.add.using(unique="replace")
    first = unique.enqueue(1)
    moved = unique.using(queue="other", priority=9).enqueue(1)
    assert first.jid == moved.jid and moved.status == "enqueued"
    found = moved.get()
    assert (found.queue_name, found.priority) == ("other", 9)


def test_raise_priority_policy_only_raises():
    unique = jobs.add.using(unique="raise_priority")
    first = unique.using(priority=5).enqueue(7)
    assert unique.using(priority=20).enqueue(7).status == "exists"
    assert first.get().priority == 20
    assert unique.using(priority=1).enqueue(7).status == "exists"
    assert first.get().priority == 20
    assert JobOptions(unique=True).unique == "skip"


def test_backoff_kinds():
    fixed = Backoff.fixed(7)
    assert [fixed.delay(n) for n in (1, 2, 5)] == [7, 7, 7]
    exp = Backoff.exponential(base=2, factor=3, maximum=50, jitter=False)
    assert [exp.delay(n) for n in (1, 2, 3, 4, 5)] == [2, 6, 18, 50, 50]
    jittered = Backoff.exponential(base=10, jitter=True)
    values = {jittered.delay(3) for _ in range(50)}
    assert all(0 <= v <= 40 for v in values) and len(values) > 1


def test_retry_policy_retries_named_exceptions_then_succeeds(flaky_dir):
    handle = jobs.flaky.enqueue(2, "a")
    outcomes = [o.outcome for o in run_queued()]
    assert outcomes == ["retried", "retried", "completed"]
    found = handle.get()
    assert found.state == "complete" and handle.result() == "ok after 3"
    # The failure recorded at the last retry names the exception class.
    assert (flaky_dir / "flaky-a").read_text() == "3"


def test_retries_exhausted_fail_with_the_real_exception(flaky_dir):
    handle = jobs.flaky.enqueue(10, "b")
    outcomes = [o.outcome for o in run_queued()]
    assert outcomes == ["retried", "retried", "retried", "failed"]
    found = handle.get()
    assert found.state == "failed" and found.failure["group"] == "tests.app.jobs.Flaky"


def test_retry_delay_uses_the_backoff():
    handle = jobs.always_flaky.enqueue()
    client = handle.client
    before = client.now()
    assert [o.outcome for o in run_queued()] == ["retried"]
    found = handle.get()
    assert found.state == "scheduled" and found.retries == 1
    score = client.redis.zscore("ql:q:default-scheduled", handle.jid)
    assert 29 <= score - before <= 32


def test_exceptions_not_named_are_not_retried():
    handle = jobs.boom.enqueue()
    assert [o.outcome for o in run_queued()] == ["failed"]
    assert handle.get().failure["group"] == "builtins.ValueError"


def test_concurrent_producers_of_a_unique_job_create_one_job():
    import threading

    from django_qless.clients import get_client

    statuses: list[str] = []
    barrier = threading.Barrier(8)

    def produce() -> None:
        barrier.wait()
        statuses.append(jobs.dedupe.using(commit_mode="immediate").enqueue("race").status)

    threads = [threading.Thread(target=produce) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == ["enqueued"] + ["skipped"] * 7
    found = get_client().queues["default"].jobs.waiting()
    assert len(found) == 1
    history = get_client().jobs[found[0]].history
    assert [h["what"] for h in history] == ["put"]
