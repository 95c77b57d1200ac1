"""Connection faults: the pubsub listener killed or half-open, and the connection
pool across fork."""

from __future__ import annotations

import json
import os
import time

import pytest
import redis
from redis.maint_notifications import MaintNotificationsConfig

from django_qless.core.client import Client
from tests.faults.conftest import assert_audit_clean, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]


def test_listener_survives_kill_half_open_and_a_raising_receiver(
    tcp_redis, rconn, proxy
):
    # Through the proxy, with redis-py 8's maintenance notifications off (RESP2 proxying).
    conn = redis.Redis(host="127.0.0.1", port=proxy.port, decode_responses=True,
                       maint_notifications_config=MaintNotificationsConfig(enabled=False))
    c = Client(conn, worker_name="w")
    got: list[dict] = []

    def bad(event: dict) -> None:
        raise RuntimeError("receiver bug")

    ev = c.events(health_check_interval=0.3, max_backoff=0.2)
    ev.on("*", bad)
    ev.on("put", got.append)
    ev.start()
    try:
        c.queues["q"].put("K", {}, jid="before")
        wait_until(lambda: any(e.get("jid") == "before" for e in got))
        # (a) the server drops the subscriber connection
        connects = ev.connects
        rconn.client_kill_filter(_type="pubsub")
        wait_until(lambda: ev.connects > connects, timeout=10)
        c.queues["q"].put("K", {}, jid="after-kill")
        wait_until(lambda: any(e.get("jid") == "after-kill" for e in got))
        # (b) half-open: the socket stays up but nothing flows; PING/PONG notices it
        connects = ev.connects
        proxy.freeze()
        t0 = time.monotonic()
        wait_until(lambda: ev.connects > connects, timeout=10)
        assert time.monotonic() - t0 < 5
        Client(tcp_redis.url).queues["q"].put("K", {}, jid="after-freeze")
        wait_until(lambda: any(e.get("jid") == "after-freeze" for e in got))
    finally:
        ev.stop()
    # Job state never depended on the events.
    assert rconn.zcard("ql:q:q-work") == 3
    assert_audit_clean(rconn)


def test_events_listener_subscribes_over_tcp_with_a_url_client(tcp_redis):
    c = Client(tcp_redis.url)
    ev = c.events(health_check_interval=0.5)
    try:
        ev.start(timeout=2)
    finally:
        ev.stop()


def test_fork_gives_each_process_its_own_connections(tcp_redis, rconn, tmp_path):
    c = Client(tcp_redis.url, worker_name="parent")
    q = c.queues["q"]
    q.put("K", {})
    job = q.pop()
    job.heartbeat()  # the parent's pool holds a used connection at fork time
    parent_id = c.redis.client_id()
    pids = []
    for n in range(8):
        pid = os.fork()
        if pid == 0:  # child: 1,250 mixed operations on the inherited client
            code = 0
            try:
                ids = set()
                for i in range(250):
                    jid = q.put("K", {"n": i}, jid=f"c{n}-{i}")
                    popped = q.pop()
                    if popped is not None:
                        popped.heartbeat()
                        popped.complete()
                    assert c.jobs[jid].jid == jid
                    ids.add(c.redis.client_id())
                (tmp_path / f"child-{n}.json").write_text(json.dumps(sorted(ids)))
            except BaseException as exc:  # report anything, never return into pytest
                (tmp_path / f"child-{n}.err").write_text(repr(exc))
                code = 1
            os._exit(code)
        pids.append(pid)
    for i in range(300):  # the parent keeps working meanwhile
        q.put("K", {}, jid=f"p-{i}")
        assert c.jobs[f"p-{i}"].state in ("waiting", "running", "complete")
    codes = [os.waitpid(pid, 0)[1] for pid in pids]
    errors = [p.read_text() for p in tmp_path.glob("child-*.err")]
    assert codes == [0] * 8, errors
    child_ids = [set(json.loads(p.read_text())) for p in tmp_path.glob("child-*.json")]
    assert len(child_ids) == 8
    everyone = [parent_id]
    for ids in child_ids:
        assert parent_id not in ids
        everyone += ids
    assert len(everyone) == len(set(everyone))  # no connection shared between processes
    job.complete()  # the parent's connections still work after the children exited
    assert c.redis.client_id() == parent_id
    while (left := q.pop(100)):
        for j in left:
            j.complete()
    assert rconn.zcard("ql:completed") == 8 * 250 + 300 + 1
    assert_audit_clean(rconn)


# ------------------------------------------------------------------------- Redis restarts


def restart(tcp_redis) -> None:
    """Stop Redis without a final save and start it again on the same port (AOF replayed)."""
    tcp_redis.crash()
    tcp_redis.start()


def test_the_same_client_works_at_once_after_a_redis_restart(tcp_redis, rconn):
    """The first put, get, pop and complete after a restart all succeed, each applied once."""
    client = Client(tcp_redis.url, worker_name="w")
    q = client.queues["q"]
    first = q.put("K", {"n": 1})
    restart(tcp_redis)
    second = q.put("K", {"n": 2})
    assert client.jobs[first].data == {"n": 1}
    restart(tcp_redis)
    job = q.pop()
    assert job is not None and job.jid == first
    restart(tcp_redis)
    assert job.complete() == "complete"
    assert q.length == 1 and [j.jid for j in q.peek(5)] == [second]
    client.close()
    assert_audit_clean(rconn)


def test_a_completion_sent_ahead_after_a_redis_restart_succeeds(tcp_redis, rconn):
    """A completion sent ahead on a connection that died with the server is sent again
    (its attempt token makes that safe) and the worker goes on."""
    client = Client(tcp_redis.url, worker_name="w")
    q = client.queues["q"]
    for n in range(3):
        q.put("K", {"n": n})
    jobs, _ = client.reserve("q", count=2)
    state, more, _ = client.send_complete_and_reserve(jobs[0], ["q"], 1).result()
    assert state == "complete" and len(more) == 1
    restart(tcp_redis)
    state, _, _ = client.send_complete_and_reserve(jobs[1], ["q"], 0).result()
    assert state == "complete"
    assert sorted(rconn.hget(f"ql:j:{j.jid}", "state") for j in (*jobs, *more)) == [
        "complete", "complete", "running"]
    client.close()


def test_a_connection_closed_by_the_server_while_idle_is_replaced(tcp_redis, rconn):
    """Redis's idle `timeout` closes the client's connection: the next call still works."""
    client = Client(tcp_redis.url, worker_name="w")
    q = client.queues["q"]
    q.put("K", {})
    rconn.config_set("timeout", 1)
    time.sleep(2.5)  # the server checks idle clients about every second
    q.put("K", {})
    assert q.length == 2
    client.close()


def test_a_read_whose_reply_was_lost_is_sent_again(tcp_redis, rconn, proxy):
    """Engine reads change nothing, so a lost reply is answered by a second try."""
    client = Client(proxy.url, worker_name="w")
    jid = client.queues["q"].put("K", {"n": 1})
    proxy.drop_reply_to = b"\r\nget\r\n"
    assert client.jobs[jid].data == {"n": 1}
    assert proxy.dropped == 1
    client.close()
