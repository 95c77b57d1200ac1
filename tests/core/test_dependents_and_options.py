"""Transitive dependents, cancelling a job with them, and the known config options."""

from __future__ import annotations

import pytest

from django_qless.core import Client, DependencyError, Queue
from django_qless.core.engine_config import KNOWN_OPTIONS, is_known_option
from django_qless.core.exceptions import LimitExceeded


def chain(q: Queue) -> None:
    """a <- b <- c, a <- d (b and d depend on a; c depends on b)."""
    q.put("K", {}, jid="a")
    q.put("K", {}, jid="b", depends=["a"])
    q.put("K", {}, jid="c", depends=["b"])
    q.put("K", {}, jid="d", depends=["a"])


def test_dependents_closure_is_transitive(client: Client, q: Queue) -> None:
    chain(q)
    assert set(client.jobs.dependents_closure("a")) == {"b", "c", "d"}
    assert client.jobs.dependents_closure("b") == ["c"]
    assert client.jobs.dependents_closure("c") == []


def test_dependents_closure_is_capped(client: Client, q: Queue) -> None:
    chain(q)
    with pytest.raises(LimitExceeded, match="more than 2 jobs depend on a"):
        client.jobs.dependents_closure("a", limit=2)


def test_cancel_alone_is_refused_but_with_dependents_cancels_all(client: Client,
                                                                 q: Queue) -> None:
    chain(q)
    with pytest.raises(DependencyError):
        client.jobs["a"].cancel()
    assert set(client.jobs.cancel_with_dependents("a")) == {"a", "b", "c", "d"}
    assert [client.jobs.get(j) for j in "abcd"] == [None] * 4


def test_cancel_with_dependents_of_a_leaf_cancels_it_alone(client: Client, q: Queue) -> None:
    chain(q)
    assert client.jobs.cancel_with_dependents("c") == ["c"]
    assert client.jobs.get("b") is not None


@pytest.mark.parametrize("key", [*KNOWN_OPTIONS, "emails-heartbeat", "q-max-concurrency"])
def test_known_options(key: str) -> None:
    assert is_known_option(key)


@pytest.mark.parametrize("key", ["heartbeats", "banana", "-heartbeat", "max-concurrency"])
def test_unknown_options(key: str) -> None:
    assert not is_known_option(key)


def test_every_engine_default_is_known(client: Client) -> None:
    assert set(client.config.all) <= set(KNOWN_OPTIONS)
