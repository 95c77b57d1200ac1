"""The idle leader that takes a job keeps the token for `--leader-hold` seconds: short jobs
put one at a time all run on one warm child, while new work ends the hold at once."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from django_qless.core.client import Client
from django_qless.core.workers.leadership import Leadership, TokenFile, open_leadership
from tests.worker.conftest import WorkerProcess, wait_until
from tests.worker.jobs import ledger
from tests.worker.test_idle_leader import registered

pytestmark = pytest.mark.timeout(120)


def pids_of_spaced_jobs(qless_client: Client, start_worker: Callable[..., WorkerProcess],
                        hold: str) -> list[int]:
    """Run 4 short jobs one at a time on 3 idle children; return the pid that ran each."""
    worker = start_worker("q", "-n", "3", "--name", "holder", "--leader-hold", hold)
    worker.wait_children(3)
    wait_until(lambda: registered(qless_client), timeout=15)
    jids = []
    for _ in range(4):
        jid = qless_client.queues["q"].put("tests.worker.jobs.ok", {})
        wait_until(lambda j=jid: qless_client.jobs[j].state == "complete", timeout=10)
        wait_until(lambda: registered(qless_client), timeout=10)  # someone leads again
        jids.append(jid)
        time.sleep(0.2)
    worker.quit()
    return [ledger(qless_client.redis, "started", jid)[0]["pid"] for jid in jids]


def test_short_jobs_put_one_at_a_time_run_on_the_leader_that_kept_the_token(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    pids = pids_of_spaced_jobs(qless_client, start_worker, "5")
    assert len(set(pids)) == 1, pids


def test_without_a_hold_the_token_goes_round_the_idle_children(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    # The kernel queues the waiting children first come, first served: each job runs on the
    # child that waited longest.
    pids = pids_of_spaced_jobs(qless_client, start_worker, "0")
    assert len(set(pids)) >= 2, pids


def test_new_work_during_the_hold_passes_the_token_on_at_once(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    # A 60 s hold: only the wake-up message of the second put can end it before the first
    # job does.
    worker = start_worker("q", "-n", "2", "--name", "holder", "--leader-hold", "60")
    worker.wait_children(2)
    wait_until(lambda: registered(qless_client), timeout=15)
    queue = qless_client.queues["q"]
    slow = queue.put("tests.worker.jobs.sleepy", {"seconds": 8})
    wait_until(lambda: ledger(qless_client.redis, "started", slow), timeout=10)
    time.sleep(0.3)
    quick = queue.put("tests.worker.jobs.ok", {})
    wait_until(lambda: ledger(qless_client.redis, "done", quick), timeout=20)
    # It ran in the other child while the slow job still ran, not after it in the same one.
    assert not ledger(qless_client.redis, "done", slow)
    (first,) = ledger(qless_client.redis, "started", slow)
    (second,) = ledger(qless_client.redis, "started", quick)
    assert first["pid"] != second["pid"]
    worker.quit()


class Sockets:
    """Stands in for the wake-up subscriptions whose sockets a hold watches."""

    def __init__(self) -> None:
        self.fds: list[int] = []

    def sockets(self) -> list[int]:
        return self.fds


def test_a_hold_ended_by_an_earlier_jobs_watch_is_not_cut_short(tmp_path: Path) -> None:
    # The leader gives the token up at job 1's start (a hold begins, watching socket `one`),
    # takes it back when job 1 ends, and gives it up again at job 2's start (watching
    # `two`). A message on `one` then ends the first hold's poll: it must not unlock the
    # token in the middle of job 2's hold.
    token = TokenFile(str(tmp_path))
    socks = Sockets()
    # (as a second child would: its own open file description of the token's file)
    waiter = Leadership(os.open(f"/proc/self/fd/{token.fd}", os.O_RDWR | os.O_CLOEXEC),
                        Sockets())  # type: ignore[arg-type]
    leader = open_leadership(token, socks, hold=3.0)  # type: ignore[arg-type]
    assert leader is not None and leader.try_take()
    one, one_w = socket.socketpair()
    two, two_w = socket.socketpair()
    try:
        waiter._want(True)
        socks.fds = [one.fileno()]
        leader.release(soon=True)
        time.sleep(0.1)  # (the helper is in the first hold's poll)
        assert leader.try_take()  # job 1 ended: the token is taken back
        socks.fds = [two.fileno()]
        leader.release(soon=True)  # job 2 starts
        one_w.send(b"x")
        time.sleep(1.0)
        assert not waiter.held  # job 2's hold (3 s) still runs
        wait_until(lambda: waiter.held, timeout=10)  # and ends
    finally:
        for sock in (one, one_w, two, two_w):
            sock.close()
