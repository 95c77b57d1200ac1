"""`client.jobs.unique_lock(jid)`: the lock unique-job producers take (glue uses no key)."""

from __future__ import annotations

import threading

import pytest

from django_qless.core import Client, InvalidArgument


def test_the_lock_serialises_holders_of_one_jid(client: Client) -> None:
    order: list[str] = []
    with client.jobs.unique_lock("j1"):
        other = threading.Thread(target=lambda: _take(client, "j1", order))
        other.start()
        other.join(0.2)
        assert other.is_alive()  # waits for the first holder
        order.append("first done")
    other.join(5)
    assert order == ["first done", "second"]


def test_different_jids_do_not_block_each_other(client: Client) -> None:
    with client.jobs.unique_lock("a"), client.jobs.unique_lock("b", timeout=0.5, wait=0.5):
        pass


def test_a_bad_jid_is_refused(client: Client) -> None:
    with pytest.raises(InvalidArgument):
        client.jobs.unique_lock("bad jid")


def _take(client: Client, jid: str, order: list[str]) -> None:
    with client.jobs.unique_lock(jid):
        order.append("second")
