"""One payload for every job signal: a frozen JobEvent, sent with sender = the alias."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from django_qless import signals
from django_qless.hooks import DjangoWorkerHooks
from django_qless.signals import JobEvent
from django_qless.testing import build_job


@pytest.fixture(autouse=True)
def no_db(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the hooks without a database (these tests only look at the signals)."""
    from django_qless import hooks

    monkeypatch.setattr(hooks, "close_old_connections", lambda: None)


class Received:
    """Connect to signals; keep (signal, sender, keyword arguments) of every send."""

    def __init__(self, *sigs: Any) -> None:
        self.sigs = sigs
        self.calls: list[tuple[Any, str, dict[str, Any]]] = []

    def __enter__(self) -> Received:
        for sig in self.sigs:
            sig.connect(self.receive, weak=False)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig in self.sigs:
            sig.disconnect(self.receive)

    def receive(self, sender: str, signal: Any, **kwargs: Any) -> None:
        self.calls.append((signal, sender, kwargs))


def test_a_job_event_is_immutable():
    event = JobEvent(event="put", jid="j1", alias="default")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.jid = "j2"  # type: ignore[misc]


def test_an_engine_payload_becomes_a_job_event_with_a_read_only_payload():
    raw = {"jid": "j1", "event": "failed", "group": "builtins.ValueError",
           "message": "boom", "worker": "host-1"}
    event = JobEvent.from_payload(raw, "reports")
    assert (event.event, event.jid, event.alias) == ("failed", "j1", "reports")
    assert (event.group, event.message, event.worker) == ("builtins.ValueError", "boom",
                                                           "host-1")
    assert event.queue is None and event.outcome is None and event.shard is None
    assert event.payload == raw
    with pytest.raises(TypeError):
        event.payload["jid"] = "other"  # type: ignore[index]
    empty_worker = JobEvent.from_payload({"jid": "j2", "event": "canceled", "worker": ""},
                                         "default")
    assert empty_worker.worker is None


def test_worker_side_job_signals_carry_a_job_event_sent_by_the_alias():
    hooks = DjangoWorkerHooks("reports")
    job = build_job("x.y", {}, queue="emails", retries=5, remaining=4)
    with Received(signals.job_started, signals.job_finished) as got:
        with pytest.raises(ZeroDivisionError):
            hooks.around_job(job, lambda: 1 / 0)
    (s1, sender1, kw1), (s2, sender2, kw2) = got.calls
    assert (s1, s2) == (signals.job_started, signals.job_finished)
    assert sender1 == sender2 == "reports"
    assert set(kw1) == set(kw2) == {"event"}
    started, finished = kw1["event"], kw2["event"]
    assert isinstance(started, JobEvent) and isinstance(finished, JobEvent)
    assert (started.event, started.jid, started.klass, started.queue) == (
        "started", job.jid, "x.y", "emails")
    assert started.alias == "reports" and started.attempt == 2 and started.job is job
    assert started.worker == job.client.worker_name and started.outcome is None
    assert (finished.event, finished.outcome, finished.group) == (
        "finished", "failed", "builtins.ZeroDivisionError")
    assert isinstance(finished.error, ZeroDivisionError)
    assert finished.message == "division by zero"


def test_a_job_that_returns_finishes_completed_without_an_error():
    with Received(signals.job_finished) as got:
        assert DjangoWorkerHooks().around_job(build_job("x.y", {}), lambda: 7) == 7
    ((_, sender, kwargs),) = got.calls
    assert sender == "default"
    assert kwargs["event"].outcome == "completed" and kwargs["event"].error is None
    assert kwargs["event"].group is None and kwargs["event"].attempt == 1


def test_no_payload_is_built_when_no_receiver_is_connected(monkeypatch):
    def refuse(*args: Any, **kwargs: Any) -> JobEvent:
        raise AssertionError("a JobEvent was built for nobody")

    monkeypatch.setattr(signals.job_started, "receivers", [])
    monkeypatch.setattr(signals.job_finished, "receivers", [])
    monkeypatch.setattr(JobEvent, "from_job", refuse)
    assert DjangoWorkerHooks().around_job(build_job("x.y", {}), lambda: 7) == 7
