"""Only one idle child of a forking worker (the leader) waits on the engine.

The others wait for the leader token (a kernel lock) without touching Redis; the leader
passes the token on as it takes a job, and the kernel drops it when the leader dies. Checked
on a real server with real worker processes: the engine's idle registry (`reserve.wait`
registrations) and its call counts, a leader killed with SIGKILL, jobs put back to back.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Callable

import pytest

from django_qless.core.client import Client
from tests.worker.conftest import WorkerProcess, wait_until
from tests.worker.jobs import ledger

pytestmark = pytest.mark.timeout(120)

CHILDREN = 4


def registered(qless_client: Client) -> set[str]:
    """Return the workers registered as idle on "q" with the engine now (not lapsed)."""
    secs, micros = qless_client.redis.time()
    now = secs + micros / 1e6
    return set(qless_client.redis.zrangebyscore("ql:idle:q", now, "+inf"))


def engine_calls(qless_client: Client) -> int:
    """Return the engine calls (FCALL, EVALSHA, EVAL) this Redis served so far."""
    stats = qless_client.redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("fcall", "evalsha", "eval"))


def idle_worker(start_worker: Callable[..., WorkerProcess], qless_client: Client,
                *extra: str) -> WorkerProcess:
    """Start CHILDREN children on "q"; wait until all run and one is registered idle."""
    worker = start_worker("q", "-n", str(CHILDREN), "--name", "idler", *extra)
    worker.wait_children(CHILDREN)
    wait_until(lambda: registered(qless_client), timeout=15)
    return worker


def test_one_idle_child_registers_and_calls_the_engine(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    # A 1 s re-check: every registered child would call reserve.wait about once a second.
    worker = idle_worker(start_worker, qless_client, "--interval", "1")
    time.sleep(3.0)  # the supervisor's first reap and every child's start are behind us
    seen: set[str] = set()
    before = engine_calls(qless_client)
    end = time.monotonic() + 8.0
    while time.monotonic() < end:
        now = registered(qless_client)
        assert len(now) <= 1, now
        seen |= now
        time.sleep(0.1)
    calls = engine_calls(qless_client) - before
    assert len(seen) == 1, seen  # the same leader throughout
    # The leader: ~8 re-checks (ttl 2 s, one call each); all four children would make ~32.
    # Slack: the supervisor's reap + config.get (at most once in 30 s while idle).
    assert calls <= 14, calls
    worker.quit()


def test_a_killed_leader_is_replaced_and_jobs_still_start(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = idle_worker(start_worker, qless_client, "--interval", "60")
    (leader,) = registered(qless_client)
    expiry = max(s for _, s in qless_client.redis.zrange("ql:idle:q", 0, -1, withscores=True))
    (info,) = qless_client.workers.info(leader)
    os.kill(int(info["pid"]), signal.SIGKILL)
    # Another child takes the token from the kernel and registers: a later expiry.
    wait_until(lambda: max(s for _, s in qless_client.redis.zrange(
        "ql:idle:q", 0, -1, withscores=True)) > expiry, timeout=10)
    jid = qless_client.queues["q"].put("tests.worker.jobs.ping", {})
    popped = qless_client.redis.blpop(["test:pings"], timeout=5)
    assert popped is not None, "no child started the job after the leader was killed"
    assert json.loads(popped[1])[0] == jid
    worker.quit()


def test_jobs_put_back_to_back_run_in_parallel_once_each(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = idle_worker(start_worker, qless_client, "--interval", "60")
    queue = qless_client.queues["q"]
    jids = [queue.put("tests.worker.jobs.sleepy", {"seconds": 0.5}) for _ in range(20)]
    wait_until(lambda: len(ledger(qless_client.redis, "done")) >= 20, timeout=30)
    started = ledger(qless_client.redis, "started")
    done = ledger(qless_client.redis, "done")
    assert Counter(r["jid"] for r in started) == Counter(jids)  # each ran once
    assert Counter(r["jid"] for r in done) == Counter(jids)
    assert len({r["pid"] for r in started}) >= 2
    # Jobs overlapped: some job started before another one (of another child) was done.
    spans = {r["jid"]: [r["t"], 0.0, r["pid"]] for r in started}
    for r in done:
        spans[r["jid"]][1] = r["t"]
    overlapping = max(sum(1 for s, e, _ in spans.values() if s <= t < e)
                      for t, _, _ in spans.values())
    assert overlapping >= 2, overlapping
    assert all(qless_client.jobs[j].state == "complete" for j in jids)
    worker.quit()


def test_a_job_that_never_blocks_still_passes_the_token_on(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    # The leader lets its helper thread unlock the token once the job lets go of the
    # interpreter; a job that computes without a blocking call lets go at Python's switch
    # interval, so the next child still leads (and is handed the next job) while it runs.
    worker = idle_worker(start_worker, qless_client, "--interval", "60")
    queue = qless_client.queues["q"]
    spinning = queue.put("tests.worker.jobs.spin", {"seconds": 3.0})
    wait_until(lambda: qless_client.jobs[spinning].state == "running", timeout=10)
    time.sleep(0.5)
    jid = queue.put("tests.worker.jobs.ping", {})
    popped = qless_client.redis.blpop(["test:pings"], timeout=10)
    assert popped is not None, "the next job did not start"
    pinged, at = json.loads(popped[1])
    assert pinged == jid
    wait_until(lambda: ledger(qless_client.redis, "spun"), timeout=15)
    (spun,) = ledger(qless_client.redis, "spun")
    # It started while the first job computed: in another child, which led by then.
    assert spun["start"] < at < spun["end"], (spun, at)
    worker.quit()


def test_a_single_child_has_no_token_and_is_handed_jobs(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = start_worker("q", "-n", "1", "--name", "solo", "--interval", "60")
    (child,) = worker.wait_children(1)
    wait_until(lambda: registered(qless_client), timeout=15)
    # One child is always the leader: neither it nor the supervisor holds a token file.
    for pid in (worker.pid, child):
        fd_dir = f"/proc/{pid}/fd"
        links = []
        for fd in os.listdir(fd_dir):
            try:
                links.append(os.readlink(f"{fd_dir}/{fd}"))
            except OSError:
                continue  # closed meanwhile
        assert not [p for p in links if "/django-qless-" in p], links
    jid = qless_client.queues["q"].put("tests.worker.jobs.ping", {})
    popped = qless_client.redis.blpop(["test:pings"], timeout=5)
    assert popped is not None and json.loads(popped[1])[0] == jid
    worker.quit()


def test_the_token_leaves_no_file_and_children_forked_later_share_it(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = idle_worker(start_worker, qless_client, "--interval", "1")
    # The supervisor keeps the token open but removed its path: a worker killed by SIGKILL
    # leaves nothing behind, and a temp cleaner has nothing to remove.
    fd_dir = f"/proc/{worker.pid}/fd"
    links = [os.readlink(f"{fd_dir}/{fd}") for fd in os.listdir(fd_dir)]
    (token,) = [p for p in links if "/django-qless-" in p]
    assert token.endswith(" (deleted)"), token
    # Children forked now open the token through the supervisor's descriptor.
    old = set(worker.children())
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: len(set(worker.children()) - old) == CHILDREN, timeout=15)
    time.sleep(3.0)  # dead children's registrations lapse (ttl 2 s); the new ones settle
    end = time.monotonic() + 4.0
    while time.monotonic() < end:
        assert len(registered(qless_client)) <= 1, registered(qless_client)
        time.sleep(0.1)
    jid = qless_client.queues["q"].put("tests.worker.jobs.ping", {})
    popped = qless_client.redis.blpop(["test:pings"], timeout=5)
    assert popped is not None and json.loads(popped[1])[0] == jid
    assert "Traceback" not in worker.stderr()
    worker.quit()
