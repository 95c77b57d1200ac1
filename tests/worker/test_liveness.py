"""Liveness: an idle worker stays live past its beat, a killed one turns stale, then dead,
then is forgotten; a clean stop leaves the list at once; quiet and stop asked through the
engine reach a serial worker and a supervisor, idle or busy."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest
import redis

from django_qless.core.client import Client
from django_qless.core.workers.heartbeat import Beat
from django_qless.core.workers.shutdown import SignalState
from tests.worker.conftest import WorkerProcess, wait_until
from tests.worker.jobs import ledger

pytestmark = pytest.mark.timeout(120)

BEAT = "2"  # seconds: beats every 1.2 s, stale after 3 s, dead after 6 s


def states(client: Client) -> dict[str, str]:
    return {row["name"]: row["state"] for row in client.workers.info()}


def started(client: Client, count: int) -> dict[str, str]:
    """Wait until `count` workers said hello; return their states."""
    return wait_until(lambda: (lambda s: s if len(s) == count else None)(states(client)),
                      timeout=30)


@pytest.mark.parametrize("processes", ["0", "3"])
def test_an_idle_worker_stays_live_past_several_beats(
    qless_client: Client, start_worker: Callable[..., WorkerProcess], processes: str,
) -> None:
    worker = start_worker("q", "-n", processes, "--beat", BEAT, "--idle-disconnect", "0.5")
    names = started(qless_client, max(1, int(processes)))
    deadline = time.monotonic() + 8  # more than three beats, idle all along
    while time.monotonic() < deadline:
        assert set(states(qless_client).values()) == {"live"}, states(qless_client)
        time.sleep(0.5)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert not set(names) & set(states(qless_client))  # a clean stop leaves the list at once
    assert not [k for k in qless_client.redis.keys() if ":wg:" in k or k.startswith("ql:wg")]


def test_a_killed_worker_turns_stale_then_dead_then_is_forgotten(
    qless_client: Client, redis_url: str, start_worker: Callable[..., WorkerProcess],
) -> None:
    worker = start_worker("q", "-n", "2", "--beat", BEAT)
    names = set(started(qless_client, 2))
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(10)
    qless_client.config["max-worker-age"] = 60

    def seen_later(seconds: float) -> Client:
        return Client(redis_url, worker_name="later", _clock=lambda: time.time() + seconds)

    with seen_later(4) as later:
        assert set(states(later).values()) == {"stale"}
    with seen_later(7) as later:
        assert set(states(later).values()) == {"dead"}
    with seen_later(70) as later:
        later.workers.counts  # noqa: B018 (a listing forgets up to 100 dead workers)
        assert not names & set(states(later))
        assert not [k for k in later.redis.keys() if ":wg:" in k or k.startswith("ql:wg")]


@pytest.mark.parametrize("processes", ["0", "2"])
@pytest.mark.parametrize("action", ["quiet", "stop"])
def test_quiet_and_stop_reach_a_busy_worker(
    qless_client: Client, start_worker: Callable[..., WorkerProcess], processes: str,
    action: str, r: redis.Redis,
) -> None:
    worker = start_worker("q", "-n", processes, "--beat", BEAT)
    qless_client.queues["q"].put("tests.worker.jobs.sleepy", {"seconds": 3}, jid="slow")
    wait_until(lambda: ledger(r, "started"), timeout=30)
    name = qless_client.jobs["slow"].worker_name
    qless_client.workers.request(name, action)
    assert worker.wait(30) == 0
    job = qless_client.jobs["slow"]
    if action == "quiet":
        assert job.state == "complete"  # it finished its job first
    else:
        assert job.state == "waiting"  # given back, as TERM does
    assert name not in states(qless_client)


@pytest.mark.parametrize("processes", ["0", "2"])
def test_quiet_reaches_an_idle_worker(
    qless_client: Client, start_worker: Callable[..., WorkerProcess], processes: str,
    r: redis.Redis,
) -> None:
    worker = start_worker("q", "-n", processes, "--beat", BEAT, "--idle-disconnect", "0.2")
    name = next(iter(started(qless_client, max(1, int(processes)))))
    time.sleep(1)  # idle: the supervisor's channels are closed by now
    qless_client.workers.request(name, "quiet")
    assert worker.wait(30) == 0
    assert ledger(r) == []


def test_a_child_killed_with_its_job_turns_dead_while_its_supervisor_beats(
    qless_client: Client, start_worker: Callable[..., WorkerProcess], r: redis.Redis,
) -> None:
    worker = start_worker("q", "-n", "2", "--beat", BEAT)
    started(qless_client, 2)
    qless_client.queues["q"].put("tests.worker.jobs.sleepy", {"seconds": 60}, jid="long")
    wait_until(lambda: ledger(r, "started"), timeout=30)
    victim = str(qless_client.jobs["long"].worker_name)
    [pid] = [row["pid"] for row in qless_client.workers.info(victim)]
    os.kill(pid, signal.SIGKILL)  # (its job is left to its lease: the name stays listed)
    wait_until(lambda: states(qless_client).get(victim) == "dead", timeout=30)
    others = {n: s for n, s in states(qless_client).items() if n != victim}
    assert others and set(others.values()) == {"live"}, others
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def test_a_request_heard_on_the_channel_and_in_beats_is_obeyed_once() -> None:
    """A second Stop would count as a second TERM (children killed at once): obeyed once."""
    signals = SignalState()
    beat = Beat("w", 60.0, signals, signals.request_stop)
    for _ in range(3):
        beat.obey("stop")
    beat.obey("quiet")
    assert (signals.stop_requests, signals.graceful) == (1, False)
    quiet = SignalState()
    quiet_beat = Beat("w", 60.0, quiet, quiet.request_stop)
    for _ in range(2):
        quiet_beat.obey("quiet")
    quiet_beat.obey("stop")  # a Stop after a Quiet still stops
    assert (quiet.stop_requests, quiet.graceful) == (1, True)
    signals.wake_pipe.close()
    quiet.wake_pipe.close()


@pytest.mark.parametrize("processes", ["0", "2"])
def test_a_worker_finishing_its_jobs_after_term_shows_draining(
    qless_client: Client, start_worker: Callable[..., WorkerProcess], processes: str,
    r: redis.Redis,
) -> None:
    worker = start_worker("q", "-n", processes, "--beat", BEAT, "--term-grace", "30")
    qless_client.queues["q"].put("tests.worker.jobs.sleepy", {"seconds": 6}, jid="slow")
    wait_until(lambda: ledger(r, "started"), timeout=30)
    name = qless_client.jobs["slow"].worker_name
    worker.signal(signal.SIGTERM)
    wait_until(lambda: states(qless_client).get(name) == "draining", timeout=15)
    assert worker.wait(30) == 0
    assert qless_client.jobs["slow"].state == "complete"
