"""Fault injection at the client/engine level: races on the lease deadline, lost
acks through a proxy, read timeouts, clock skew, out of memory, eviction, recurring jobs,
big batches and data fidelity (catalogue: docs/faults.md)."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis

from django_qless.core.audit import audit
from django_qless.core.client import Client
from django_qless.core.engine.channel import NodeChannel
from django_qless.core.exceptions import (
    InvalidArgument,
    InvalidStateTransition,
    LostLockError,
    QlessConnectionError,
    QlessError,
)
from django_qless.core.health import check_eviction, clock_skew
from tests.faults.conftest import assert_audit_clean

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]


def evalsha_calls(r: redis.Redis) -> int:
    """Return how many engine calls (FCALL or EVALSHA) the server has executed so far."""
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("evalsha", "fcall", "eval"))


# ------------------------------------------------------------------------- lease deadline

@pytest.mark.parametrize("first", ["pop", "heartbeat"])
def test_heartbeat_racing_the_lease_deadline(tcp_redis, rconn, first):
    now = [1000.0]
    a = Client(tcp_redis.url, worker_name="A", _clock=lambda: now[0])
    b = Client(tcp_redis.url, worker_name="B", _clock=lambda: now[0])
    a.config["heartbeat"] = 10
    a.config["grace-period"] = 0  # the lease ends exactly at T
    jid = a.queues["q"].put("K", {})
    job = a.queues["q"].pop()
    assert job is not None and job.expires_at == 1010.0
    now[0] = 1010.001
    if first == "pop":
        taken = b.queues["q"].pop()
        assert taken is not None and taken.jid == jid
        with pytest.raises(LostLockError):
            job.heartbeat()
        holder = "B"
    else:
        assert job.heartbeat() == pytest.approx(1020.001)
        assert b.queues["q"].pop() is None
        holder = "A"
    # Never two holders: the job names one worker, only that worker's set lists it.
    assert rconn.hget(f"ql:j:{jid}", "worker") == holder
    assert [w for w in "AB" if rconn.zscore(f"ql:w:{w}:jobs", jid) is not None] == [holder]
    assert_audit_clean(rconn)


def test_late_heartbeat_without_a_pop_in_between_succeeds(tcp_redis, rconn):
    now = [1000.0]
    a = Client(tcp_redis.url, worker_name="A", _clock=lambda: now[0])
    a.config["heartbeat"] = 10
    a.queues["q"].put("K", {})
    job = a.queues["q"].pop()
    now[0] = 1100.0  # 90 s past the lease: lazy expiry keeps it (documented)
    assert job.heartbeat() == pytest.approx(1110.0)
    job.complete()
    assert_audit_clean(rconn)


# ------------------------------------------------------------------------- lost replies

def done_count(url: str, jid: str) -> int:
    """Return how many `done` entries the job's history holds."""
    return [h["what"] for h in Client(url).jobs[jid].history].count("done")


def test_lost_ack_on_complete_is_replayed_with_its_token(tcp_redis, rconn, proxy):
    c = Client(proxy.url, worker_name="P")
    jid = c.queues["q"].put("K", {})
    job = c.queues["q"].pop()
    before = evalsha_calls(rconn)
    proxy.drop_reply_to = b"complete"
    # The reply is lost; the client sends the same call (same attempt token) once more and
    # the engine answers with what it recorded instead of completing (or refusing) again.
    assert job.complete() == "complete"
    assert proxy.dropped == 1
    assert evalsha_calls(rconn) == before + 2
    assert rconn.hget(f"ql:j:{jid}", "done") == f"{job.attempt_token} complete"
    assert done_count(tcp_redis.url, jid) == 1
    assert rconn.zcard("ql:completed") == 1
    # Another attempt (another token) is still refused: one accepted completion per pop.
    again = Client(tcp_redis.url, worker_name="P")
    with pytest.raises((InvalidStateTransition, LostLockError)):
        again.call("complete", jid, "P", "q", "{}", "token", "other-attempt")
    assert done_count(tcp_redis.url, jid) == 1
    assert_audit_clean(rconn)


def test_lost_ack_twice_is_ambiguous_but_applied_once(tcp_redis, rconn, proxy):
    c = Client(proxy.url, worker_name="P")
    jid = c.queues["q"].put("K", {})
    job = c.queues["q"].pop()
    proxy.drop_reply_to = b"complete"

    real_invoke = c._invoke
    calls = []

    def invoke_dropping_twice(argv):
        calls.append(argv)
        if len(calls) == 2:
            proxy.drop_reply_to = b"complete"
        return real_invoke(argv)

    c._invoke = invoke_dropping_twice
    with pytest.raises(QlessConnectionError):
        job.complete()
    assert len(calls) == 2 and calls[0] == calls[1]
    assert rconn.hget(f"ql:j:{jid}", "state") == "complete"
    assert done_count(tcp_redis.url, jid) == 1
    assert_audit_clean(rconn)


def test_lost_ack_on_pop_job_comes_back_after_the_lease(tcp_redis, rconn, proxy):
    """Plain qless `pop` has no request token: the job waits out its lease."""
    c = Client(proxy.url, worker_name="P")
    c.config["heartbeat"] = 1
    c.config["grace-period"] = 0
    jid = c.queues["q"].put("K", {}, retries=3)
    before = evalsha_calls(rconn)
    proxy.drop_reply_to = b"pop"
    with pytest.raises(QlessConnectionError):
        c.queues["q"].pop()
    assert evalsha_calls(rconn) == before + 1
    # The engine handed the job to P, which never learnt of it: it is running for P ...
    assert rconn.hget(f"ql:j:{jid}", "worker") == "P"
    # ... until the lease runs out, then another worker gets it (one retry spent).
    other = Client(tcp_redis.url, worker_name="Q")
    time.sleep(1.2)
    job = other.queues["q"].pop()
    assert job is not None and job.jid == jid and job.retries == 2
    job.complete()
    assert_audit_clean(rconn)


def test_lost_ack_on_reserve_returns_the_same_jobs(tcp_redis, rconn, proxy):
    """The worker's reserve takes back what the lost call handed it instead of popping more."""
    c = Client(proxy.url, worker_name="P")
    q = c.queues["q"]
    first, second = q.put("K", {}), q.put("K", {})
    before = evalsha_calls(rconn)
    proxy.drop_reply_to = b"reserve"
    jobs, _ = c.reserve(["q"])
    assert [j.jid for j in jobs] == [first]
    # the lost reserve, then two reads (the worker's jobs, the orphan's data): no second pop
    assert evalsha_calls(rconn) == before + 3
    assert rconn.hget(f"ql:j:{second}", "state") == "waiting"
    assert jobs[0].complete() == "complete"
    assert_audit_clean(rconn)


def test_lost_ack_on_complete_reserve_returns_recorded_state_and_jobs(
    tcp_redis, rconn, proxy
):
    c = Client(proxy.url, worker_name="P")
    q = c.queues["q"]
    a, b, rest = q.put("K", {}), q.put("K", {}), q.put("K", {})
    (job,), _ = c.reserve(["q"])
    proxy.drop_reply_to = b"complete.reserve"
    state, more, _ = c.complete_and_reserve(job, ["q"])
    assert proxy.dropped == 1
    assert (state, [j.jid for j in more]) == ("complete", [b])
    assert rconn.hget(f"ql:j:{rest}", "state") == "waiting"  # nothing popped twice
    assert done_count(tcp_redis.url, a) == 1
    more[0].complete()
    assert_audit_clean(rconn)


def test_lost_ack_on_a_deferred_complete_reserve_is_replayed(tcp_redis, rconn, proxy):
    """The worker's completion sent ahead: its reply, read later, is lost on the way."""
    c = Client(proxy.url, worker_name="P")
    q = c.queues["q"]
    a, b, rest = q.put("K", {}), q.put("K", {}), q.put("K", {})
    (job,), _ = c.reserve(["q"])
    proxy.drop_reply_to = b"complete.reserve"
    call = c.send_complete_and_reserve(job, ["q"])
    other = q.put("K", {})  # the thread's own connection is free meanwhile
    state, more, _ = call.result()
    assert proxy.dropped == 1
    assert (state, [j.jid for j in more]) == ("complete", [b])
    assert call.result()[1] is more  # read and decoded once
    assert rconn.hget(f"ql:j:{rest}", "state") == "waiting"  # nothing popped twice
    assert done_count(tcp_redis.url, a) == 1
    more[0].complete()
    assert {rconn.hget(f"ql:j:{j}", "state") for j in (rest, other)} == {"waiting"}
    assert_audit_clean(rconn)


def test_a_deferred_complete_refused_raises_its_typed_error(tcp_redis, rconn):
    c = Client(tcp_redis.url, worker_name="P")
    c.queues["q"].put("K", {})
    (job,), _ = c.reserve(["q"])
    Client(tcp_redis.url).jobs[job.jid].timeout()  # the lock is gone before we complete
    call = c.send_complete_and_reserve(job, ["q"])
    for _ in range(2):  # the same error every time it is asked
        with pytest.raises((LostLockError, InvalidStateTransition)):
            call.result()
    assert_audit_clean(rconn)


@pytest.mark.parametrize("op", ["put", "fail", "retry", "heartbeat"])
def test_lost_ack_on_other_mutations_executes_once(tcp_redis, rconn, proxy, op):
    c = Client(proxy.url, worker_name="P")
    q = c.queues["q"]
    jid = q.put("K", {}, jid="fixed-jid", retries=4)
    job = q.pop()
    before = evalsha_calls(rconn)
    proxy.drop_reply_to = op.encode()
    if op in ("fail", "retry"):
        # Token-carrying calls are replayed once and answered from the record.
        result = job.fail("g", "m") if op == "fail" else job.retry()
        assert result == (jid if op == "fail" else 3)
        assert evalsha_calls(rconn) == before + 2
    else:
        with pytest.raises(QlessConnectionError):
            if op == "put":
                q.put("K", {"n": 1}, jid=jid)
            else:
                job.heartbeat()
        assert evalsha_calls(rconn) == before + 1
    assert proxy.dropped == 1
    state = rconn.hgetall(f"ql:j:{jid}")
    expected = {"put": "waiting", "fail": "failed", "retry": "waiting", "heartbeat": "running"}
    assert state["state"] == expected[op]
    if op == "retry":
        assert state["remaining"] == "3"  # spent once, not twice
    if op == "fail":
        assert rconn.llen("ql:f:g") == 1
    if op == "put":
        # A caller-chosen jid makes put naturally idempotent: re-sending it is harmless.
        Client(tcp_redis.url, worker_name="P").queues["q"].put("K", {"n": 1}, jid=jid)
        assert rconn.zcard("ql:q:q-work") == 1
    assert_audit_clean(rconn)


# ------------------------------------------------------------------------- read timeouts

def test_read_timeout_raises_once_without_resending(tcp_redis, rconn):
    c = Client(tcp_redis.url, worker_name="P", socket_timeout=0.3)
    c.channel.load_script()
    before = evalsha_calls(rconn)
    rconn.client_pause(1500, all=True)  # the server stalls longer than the socket timeout
    t0 = time.monotonic()
    with pytest.raises(QlessConnectionError):
        c.queues["q"].put("K", {}, jid="slow-put")
    elapsed = time.monotonic() - t0
    assert elapsed < 1.0  # one timeout, not a chain of redis-py retries
    time.sleep(1.7)
    executed = evalsha_calls(rconn) - before
    assert executed <= 1
    assert rconn.exists("ql:j:slow-put") == executed
    assert_audit_clean(rconn)


# ------------------------------------------------------------------------- clock skew

def test_skewed_local_clock_does_not_steal_a_healthy_job(tcp_redis, rconn, monkeypatch):
    a = Client(tcp_redis.url, worker_name="A")
    a.config["heartbeat"] = 60
    jid = a.queues["q"].put("K", {})
    held = a.queues["q"].pop()
    # Worker B's wall clock runs 300 s ahead; the client measures Redis TIME instead.
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 300)
    b = Client(tcp_redis.url, worker_name="B")
    assert abs(b.now() - a.now()) < 1.0
    assert b.queues["q"].pop() is None and b.queues["q"].pop() is None
    late = b.queues["q"].put("K", {}, delay=30)
    assert b.queues["q"].pop() is None  # scheduled by the server's clock, not B's
    monkeypatch.setattr(time, "time", real)
    assert clock_skew(rconn, clock=lambda: real() + 300) > 60 / 4  # what the worker warns on
    held.heartbeat()
    held.complete()
    assert rconn.hget(f"ql:j:{late}", "state") == "scheduled"
    assert a.jobs[jid].state == "complete"
    assert_audit_clean(rconn)


def test_clients_60s_fast_or_slow_cannot_steal_or_backdate_a_lease(tcp_redis, rconn):
    """Whatever time a client sends, the engine judges leases by the server's clock."""
    a = Client(tcp_redis.url, worker_name="A")
    a.config["heartbeat"] = 30
    a.config["grace-period"] = 0  # without the server's clock, 60 s ahead would take it at once
    jid = a.queues["q"].put("K", {})
    held = a.queues["q"].pop()
    fast = Client(tcp_redis.url, worker_name="B")
    slow = Client(tcp_redis.url, worker_name="C")
    # No public way to set a client's clock: these two stand for hosts whose clocks are off.
    fast._clock = lambda: fast.server_clock() + 60
    slow._clock = lambda: slow.server_clock() - 60
    assert fast.queues["q"].pop() is None
    assert fast.reserve("q")[0] == [] and fast.reap() == []
    assert held.heartbeat() >= a.now() + 29
    # The slow client's own lease runs from the server's time, not 60 s in the past.
    other = a.queues["q"].put("K", {})
    mine = slow.queues["q"].pop()
    assert mine is not None and mine.jid == other
    assert mine.expires_at >= a.now() + 29
    assert mine.heartbeat() >= a.now() + 29
    assert a.queues["q"].pop() is None and fast.queues["q"].pop() is None
    held.complete()
    mine.complete()
    assert a.jobs[jid].state == a.jobs[other].state == "complete"
    for c in (fast, slow):
        c.close()
    assert_audit_clean(rconn)


# ------------------------------------------------------------------------- memory and eviction

def test_out_of_memory_put_raises_and_nothing_half_written(tcp_redis, rconn, qless_client):
    q = qless_client.queues["q"]
    running = q.put("K", {})
    job = q.pop()
    used = int(rconn.info("memory")["used_memory"])
    rconn.config_set("maxmemory", used + 2_000_000)
    payload = {"blob": "x" * 50_000}
    accepted, refused = [], None
    for i in range(200):
        try:
            accepted.append(q.put("K", payload, jid=f"big-{i}"))
        except QlessError as exc:
            refused = exc
            break
    assert refused is not None and "OOM" in str(refused)
    assert all(rconn.exists(f"ql:j:{j}") for j in accepted)
    assert not rconn.exists(f"ql:j:big-{len(accepted)}")
    assert_audit_clean(rconn)
    # complete writes too, so at the limit it is refused the same way, before any write
    # (observed on 7.0 and 6.2): the job stays running and keeps its lease.
    try:
        job.complete()
        completed_at_limit = True
    except QlessError as exc:
        assert "OOM" in str(exc)
        completed_at_limit = False
        assert rconn.hget(f"ql:j:{running}", "state") == "running"
    print(f"out of memory: {len(accepted)} puts accepted; complete at the limit "
          f"{'accepted' if completed_at_limit else 'refused (OOM)'}")
    assert_audit_clean(rconn)
    rconn.config_set("maxmemory", 0)
    if not completed_at_limit:
        job.complete()
    assert q.put("K", {}) and qless_client.jobs[running].state == "complete"
    assert_audit_clean(rconn)


def test_eviction_policy_is_reported_and_its_damage_detected(tcp_redis, rconn, qless_client):
    assert check_eviction(rconn) is None
    rconn.config_set("maxmemory-policy", "allkeys-random")
    warning = check_eviction(qless_client)
    assert warning and "allkeys-random" in warning
    used = int(rconn.info("memory")["used_memory"])
    rconn.config_set("maxmemory", used + 3_000_000)
    q = qless_client.queues["q"]
    for i in range(300):
        q.put("K", {"blob": "y" * 20_000}, jid=f"e-{i}", tags=["t"])
    assert int(rconn.info("stats")["evicted_keys"]) > 0
    report = audit(rconn)
    assert not report.ok
    kinds = set(report.by_invariant())
    assert kinds & {"index.ghost", "index.missing", "tags.index", "tags.counter"}, kinds
    rconn.config_set("maxmemory", 0)
    rconn.config_set("maxmemory-policy", "noeviction")
    fixed = audit(rconn, fix=True)
    assert fixed.ok, str(fixed)


# ------------------------------------------------------------------------- recurring jobs

def test_recurring_spawns_once_per_interval_under_concurrent_pops(tcp_redis, rconn):
    now = [0.0]
    base = Client(tcp_redis.url, _clock=lambda: now[0])
    rjid = base.queues["r"].recur("K", {}, 60, jid="nightly", backlog=2)
    now[0] = 60.5
    popped: list[str] = []
    barrier = threading.Barrier(8)

    def popper(i: int) -> None:
        c = Client(tcp_redis.url, worker_name=f"w{i}", _clock=lambda: now[0])
        barrier.wait()
        jobs = c.queues["r"].pop(5)
        popped.extend(j.jid for j in jobs)
        c.close()

    threads = [threading.Thread(target=popper, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(popped) == ["nightly-1", "nightly-2"]  # t=0 and t=60, each once
    # (b) re-registering at boot keeps the counter: no child jid is reused
    base.queues["r"].recur("K", {}, 60, jid="nightly", backlog=2)
    assert base.jobs.recurring(rjid).count == 2
    # (c) a long idle gap spawns at most backlog + 1 children
    now[0] = 60.5 + 100 * 60
    assert len(base.queues["r"].pop(1000)) <= 3
    # (d) a normal job cannot take a child's jid
    with pytest.raises(QlessError):
        base.queues["r"].put("K", {}, jid="nightly-999")
    assert_audit_clean(rconn)


# ------------------------------------------------------------------------- batch sizes

def test_oversized_batches_are_refused_up_front(tcp_redis, rconn, qless_client):
    q = qless_client.queues["q"]
    for start in range(0, 9000, 1000):
        q.put_many([{"klass": "K", "data": {}, "jid": f"b{start + i}"} for i in range(1000)])
    assert rconn.zcard("ql:q:q-work") == 9000
    with pytest.raises(InvalidArgument):
        q.pop(9000)
    tags = json.dumps([f"t{i}" for i in range(9000)])
    deps = json.dumps([f"b{i}" for i in range(9000)])
    # Straight to the engine, past the Python checks: the Lua refuses before any write.
    for extra in (["tags", tags], ["depends", deps]):
        with pytest.raises(InvalidArgument):
            qless_client.call("put", "w", "q", "big", "K", "{}", 0, *extra)
    with pytest.raises(InvalidArgument):
        qless_client.call("pop", "q", "w", 9000)
    assert rconn.zcard("ql:q:q-locks") == 0 and not rconn.exists("ql:j:big")
    assert rconn.zcard("ql:q:q-work") == 9000
    assert_audit_clean(rconn)


# ------------------------------------------------------------------------- data fidelity

def test_job_data_is_kept_byte_for_byte_on_every_path(tcp_redis, rconn, qless_client):
    texts = [
        '{"a":[],"b":{},"c":[[],[{}]],"big":12345678901234567890,"f":0.1,"tiny":1e-300}',
        '{"u":"emoji \U0001f600 rtl \u05e9\u05dc\u05d5\u05dd e\u0301","nul":"\\u0000"}',
        '{ "spaced" : [ ] ,"neg":-0.0,"exp":1E+2}',
        '{"last":[1,2,3],"deep":{"x":{"y":[]}}}',
    ]
    qless_client.call("put", "w", "q", "fid", "K", texts[0], 0)
    job = qless_client.queues["q"].pop()
    assert job.raw_data == texts[0]
    qless_client.call("heartbeat", "fid", qless_client.worker_name, texts[1])
    assert qless_client.jobs["fid"].raw_data == texts[1]
    qless_client.call("complete", "fid", qless_client.worker_name, "q", texts[2], "next", "q2")
    assert qless_client.jobs["fid"].raw_data == texts[2]
    again = qless_client.queues["q2"].pop()
    assert again.raw_data == texts[2]
    qless_client.call("complete", "fid", qless_client.worker_name, "q2", texts[3])
    assert qless_client.jobs["fid"].raw_data == texts[3]
    assert rconn.hget("ql:j:fid", "data") == texts[3]
    assert_audit_clean(rconn)


# ------------------------------------------------------------------------- script flush (client)

def test_flush_between_reload_and_retry_is_survived(tcp_redis, rconn, monkeypatch):
    c = Client(tcp_redis.url)
    real = NodeChannel.load_script
    flushed: list[int] = []

    def load_then_flush(self: NodeChannel) -> str:
        sha = real(self)
        if not flushed:
            flushed.append(1)
            rconn.script_flush()  # another operator (or failover) empties the cache again
        return sha

    monkeypatch.setattr(NodeChannel, "load_script", load_then_flush)
    rconn.script_flush()
    c.queues["q"].put("K", {}, jid="survives")
    assert rconn.exists("ql:j:survives")


# ---------------------------------------------------------------------- deliberate engine choices
# Each is written up in docs/compatibility.md (fixes 14-16, the catch-up default).

def test_a_job_and_a_recurring_job_may_share_a_jid(tcp_redis, rconn, qless_client):
    # Deliberate (docs/compatibility.md): they live in separate key spaces (ql:j: and ql:r:),
    # so neither overwrites the other; only spawned child names (<jid>-<n>) are refused.
    q = qless_client.queues["r"]
    q.recur("K", {"recurring": True}, 60, jid="nightly")
    q.put("K", {"plain": True}, jid="nightly")
    assert qless_client.jobs["nightly"].data == {"plain": True}
    assert qless_client.jobs.recurring("nightly").data == {"recurring": True}
    with pytest.raises(QlessError, match="collides with recurring job nightly"):
        q.put("K", {}, jid="nightly-7")


def test_default_backlog_is_small(tcp_redis, rconn):
    now = [0.0]
    c = Client(tcp_redis.url, _clock=lambda: now[0])
    c.queues["r"].recur("K", {}, 60, jid="nightly")
    now[0] = 100 * 60 + 0.5  # nobody popped for 100 intervals
    assert len(c.queues["r"].pop(1000)) <= 10


def test_priority_of_a_stalled_job_keeps_it_at_the_front(tcp_redis, rconn, qless_client):
    jid = qless_client.queues["q"].put("K", {})
    qless_client.queues["q"].pop().timeout()
    qless_client.jobs[jid].set_priority(5)
    assert_audit_clean(rconn)  # stalled => work score +inf


def test_dependency_cycle_is_refused_at_put(tcp_redis, rconn, qless_client):
    q = qless_client.queues["c"]
    q.put("K", {}, jid="A1")
    q.put("K", {}, jid="B1", depends=["A1"])
    with pytest.raises(QlessError):
        q.put("K", {}, jid="A1", depends=["B1"])
