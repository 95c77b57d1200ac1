"""Moving a queue between shards online (core/cluster/queue_move.py) on a real cluster."""

from __future__ import annotations

import io
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from django_qless.core.audit import audit_all
from django_qless.core.cluster.queue_move import MoveBlocked, MoveProgress, QueueMove, main
from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.exceptions import QlessError
from testservers.cluster import LocalCluster

__all__: list[str] = []

Q = "mv"


@pytest.fixture
def sharded(cluster: LocalCluster, rc: RedisCluster) -> Iterator[ShardedClient]:
    """Six shards; queue mv on s0 and cached placements for half a second."""
    client = ShardedClient(rc, shards=6, worker_name="w1")
    client.placement.cache_seconds = 0.5
    client.placement.record(Q, 0)
    yield client
    client.close()


def left_on(sharded: ShardedClient, tag: str) -> dict[str, int]:
    """Return the jobs of mv a shard still holds, by state (zeros dropped)."""
    counts = sharded.shard(tag).queues[Q].counts
    states = ("waiting", "scheduled", "stalled", "throttled", "running", "depends", "recurring")
    return {k: int(counts[k]) for k in states if counts.get(k)}


class LateProducer(threading.Thread):
    """Put to mv every 20 ms as `late` places it (a client whose cached placement predates
    the switch) until a put lands on `target` (its cache ran out)."""

    def __init__(self, late: ShardedClient, target: str) -> None:
        super().__init__()
        self.late, self.target = late, target
        self.put: list[str] = []
        self.errors: list[BaseException] = []

    def run(self) -> None:
        try:
            while True:
                shard = self.late.for_queue(Q)
                self.put.append(shard.queues[Q].put("K", {}))
                if shard.shard == self.target:
                    return
                time.sleep(0.02)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)


def ledger(rc: RedisCluster, sharded: ShardedClient, tags: tuple[str, ...]) -> str:
    """Return what each shard holds of mv: counts, every unfinished job with its state and
    its scores in the queue's sets, the engine's hidden `#` config fields, the placement."""
    lines = [f"placement: {sharded.placement.recorded().get(Q)}, moving: "
             f"{sharded.placement.moving()}, serving: "
             f"{[c.shard for c in sharded.serving(Q)]}"]
    for tag in tags:
        ks = f"ql:{{{tag}}}:"
        paused = rc.sismember(f"{ks}paused_queues", Q)
        marks = {k: v for k, v in (rc.hgetall(f"{ks}config") or {}).items()
                 if k.startswith("#")}
        lines.append(f"{tag}: left {left_on(sharded, tag)}, paused {paused}, "
                     f"listed {rc.zscore(f'{ks}queues', Q)}, config {marks}")
        for key in job_keys(rc, tag):
            jid = key.rsplit(":", 1)[1]
            state = rc.hget(key, "state")
            if state == "complete":
                continue
            scores = {kind: rc.zscore(f"{ks}q:{Q}-{kind}", jid)
                      for kind in ("work", "scheduled", "locks", "throttled", "depends")}
            lines.append(f"  {jid}: {state} {rc.hmget(key, 'worker', 'expires', 'priority')}"
                         f" {scores}")
    return "\n".join(lines)


def job_keys(rc: RedisCluster, tag: str) -> list[str]:
    """Return the job hashes of shard `tag` whose queue is mv."""
    node_keys = []
    for key in rc.scan_iter(match=f"ql:{{{tag}}}:j:*", count=1000):
        if rc.type(key) == "hash" and rc.hget(key, "queue") == Q:
            node_keys.append(key)
    return node_keys


@pytest.mark.parametrize("crash", ["none", "between-put-and-cancel", "after-switch"])
def test_move_under_load_loses_nothing(cluster: LocalCluster, sharded: ShardedClient,
                                       rc: RedisCluster, crash: str) -> None:
    """Two producers and two consumers run while the queue moves (in one go, or resumed
    after a crash); then the ledger: every job put completed, duplicates only as named."""
    source, target = sharded.tags[0], sharded.tags[3]
    put: list[str] = []
    done: Counter[str] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []
    producing = threading.Event()
    producing.set()
    moved = threading.Event()

    def producer(n: int) -> None:
        client = cluster.client()
        mine = ShardedClient(client, shards=6, worker_name=f"p{n}")
        mine.placement.cache_seconds = 0.5
        try:
            for i in range(400):
                jid = f"p{n}-{i}"
                queue = mine.for_queue(Q).queues[Q]
                queue.put("K", {"i": i}, jid=jid, priority=i % 3,
                          delay=0.3 if i % 10 == 0 else 0)
                with lock:
                    put.append(jid)
                time.sleep(0.004)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            mine.close()
            client.close()

    def consumer(n: int) -> None:
        client = cluster.client()
        mine = ShardedClient(client, shards=6, worker_name=f"c{n}")
        mine.placement.cache_seconds = 0.5
        idle_since: float | None = None
        try:
            while True:
                got = 0
                for shard in mine.serving(Q):
                    jobs, _ = shard.reserve([Q], count=5)
                    for job in jobs:
                        time.sleep(0.002)
                        job.complete()
                        with lock:
                            done[job.jid] += 1
                    got += len(jobs)
                if got:
                    idle_since = None
                else:
                    if not producing.is_set() and moved.is_set():
                        if not any(left_on(mine, tag) for tag in (source, target)):
                            return
                        # Nothing handed out for 10 s, yet jobs are counted: fail with
                        # what the shards hold instead of waiting for the test timeout.
                        idle_since = idle_since or time.monotonic()
                        if time.monotonic() - idle_since > 10:
                            raise AssertionError(
                                f"consumer c{n}: no job reserved in 10 s, but jobs are "
                                f"left:\n{ledger(rc, mine, (source, target))}")
                    time.sleep(0.02)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            mine.close()
            client.close()

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(2)]
    threads += [threading.Thread(target=consumer, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # jobs put and running on the source
    steps: list[MoveProgress] = []
    move = QueueMove(sharded, Q, target, settle=1.0, poll=0.05, drain_timeout=60,
                     report=lambda p: steps.append(MoveProgress(**vars(p))))
    allowed: set[str] = set()  # jobs a crash may run twice (docs/scaling.md)
    if crash != "none":
        sharded.placement.mark_moving(Q, target)
        move.fence(source)
        if crash == "between-put-and-cancel":
            src, dst = sharded.shard(source), sharded.shard(target)
            for job in src.queues[Q].peek(50):  # put on the target, the cancel never sent
                dst.call("put", "", Q, job.jid, job.klass_name, job.raw_data, 0,
                         "priority", job.priority, "if-absent", "live")
                allowed.add(job.jid)
        else:
            move.copy_rounds(source, MoveProgress(Q, source, target), below=250)
            sharded.placement.switch(Q, source, target)
            # A client that missed the switch puts on the source (under load the producers
            # may all refresh their placement right at the switch and put none there).
            late = sharded.shard(source).queues[Q].put("K", {}, jid="late-after-switch")
            with lock:
                put.append(late)
        time.sleep(0.3)  # the crashed mover is restarted a little later
        steps.clear()
    [progress] = move.run()
    moved.set()
    for thread in threads[:2]:
        thread.join(60)
    producing.clear()
    for thread in threads[2:]:
        thread.join(60)
    assert not errors, "\n".join(map(str, errors))
    assert not any(thread.is_alive() for thread in threads)
    # The ledger: every job put ran at least once; without a crash or a lost lease, once.
    assert len(put) == 800 + (crash == "after-switch")
    assert set(put) - set(done) == set()
    assert {jid for jid, n in done.items() if n > 1} <= allowed
    assert sharded.shard_of(Q) == target and Q not in sharded.placement.moving()
    assert left_on(sharded, source) == {} and left_on(sharded, target) == {}
    names = [step.step for step in steps]
    assert names[0] == ("fenced" if crash == "after-switch" else "marked")
    assert ("switched" in names) == (crash != "after-switch") and names[-1] == "done"
    assert progress.source == source and progress.copied + len(allowed) > 0
    # Nothing of the queue is left on the source but completed jobs.
    for key in job_keys(rc, source):
        assert rc.hget(key, "state") == "complete"
    assert not sharded.shard(source).queues[Q].paused
    # And every shard is consistent: the engine's invariants hold after the move.
    reports = audit_all(sharded)
    assert all(report.ok for report in reports), [str(report) for report in reports]
    assert sum(report.jobs for report in reports) >= 800  # every job's record was checked


def test_a_move_carries_schedules_settings_and_recurring_jobs(sharded: ShardedClient) -> None:
    source, target = sharded.shard(0), sharded.shard(2)
    queue = source.queues[Q]
    queue.heartbeat = 30
    queue.max_concurrency = 2
    source.queues["mv-x"].heartbeat = 5  # another queue's setting stays
    queue.set_throttle(4)
    later = queue.put("K", {"x": 1}, delay=300, priority=5, tags=["t"], retries=2)
    assert source.track(later)
    rjid = queue.recur("K", {"r": 1}, 60, offset=0, priority=3, tags=["rt"], backlog=2)
    [spawned] = queue.pop(1)  # spawns rjid-1 and takes it: it runs on the source
    assert spawned.jid == f"{rjid}-1"
    runner = threading.Thread(target=lambda: (time.sleep(0.5), spawned.complete()))
    runner.start()
    QueueMove(sharded, Q, 2, settle=0.1, poll=0.05, drain_timeout=10).run()
    runner.join()
    moved = target.jobs[later]
    assert moved is not None and moved.state == "scheduled"
    assert (moved.priority, moved.tags, moved.original_retries) == (5, ("t",), 2)
    assert moved.tracked
    due = target.read(lambda r: r.zscore(target.keyspace.key(f"q:{Q}-scheduled"), later))
    assert 280 < float(due) - target.now() <= 300
    assert target.queues[Q].heartbeat == 30 and target.queues[Q].max_concurrency == 2
    assert target.config.get("mv-x-heartbeat") is None
    assert target.queues[Q].throttle.maximum == 4
    template = target.jobs.recurring(rjid)
    assert template is not None and source.jobs.recurring(rjid) is None
    assert template.priority == 3 and template.tags == ("rt",)
    # The next child on the target goes on from the source's numbering, at its next run.
    assert target.call_json("recur.get", rjid)["count"] == 1
    nxt = target.read(lambda r: r.zscore(target.keyspace.key(f"q:{Q}-recur"), rjid))
    assert 50 < float(nxt) - target.now() <= 60


def test_a_moved_job_keeps_its_history_and_retries_left(sharded: ShardedClient) -> None:
    """A job that ran, logged and used a retry moves: on the target its history holds the
    old entries, then the move's put; its retries left are unchanged."""
    source, target = sharded.shard(0), sharded.shard(1)
    jid = source.queues[Q].put("K", {}, retries=3)
    job = source.queues[Q].pop()
    assert job is not None and job.jid == jid
    job.log("checked", {"step": 2})
    assert job.retry() == 2
    old = source.jobs[jid]
    assert old is not None and old.retries == 2
    before = old.history
    assert [e["what"] for e in before] == ["put", "popped", "checked", "retry"]
    [progress] = QueueMove(sharded, Q, 1, settle=0.1, poll=0.05, drain_timeout=5).run()
    assert progress.copied == 1
    moved = target.jobs[jid]
    assert moved is not None and moved.state == "waiting"
    assert (moved.original_retries, moved.retries) == (3, 2)
    after = moved.history
    assert after[:-1] == before
    assert after[-1]["what"] == "put" and after[-1]["q"] == Q
    again = target.queues[Q].pop()
    assert again is not None and again.retry() == 1  # the budget goes on counting down
    assert [e["what"] for e in target.jobs[jid].history][-3:] == ["put", "popped", "retry"]


def test_a_move_resumes_after_a_crash_at_any_step(sharded: ShardedClient) -> None:
    source, target = sharded.shard(0), sharded.shard(1)
    jids = [source.queues[Q].put("K", {"n": n}) for n in range(30)]
    move = QueueMove(sharded, Q, 1, settle=0.1, poll=0.05, drain_timeout=5)
    sharded.placement.mark_moving(Q, 1)
    move.fence(source.shard or "")
    # A crash between a put on the target and the cancel here: the job is on both.
    job = source.jobs[jids[0]]
    assert job is not None
    target.call("put", "", Q, job.jid, "K", job.raw_data, 0, "if-absent", "any")
    assert move.copy_round(source.shard or "") == 30  # the repeat skips the put, cancels here
    for jid in jids[:5]:
        source.queues[Q].put("K", {}, jid=f"late-{jid}")
    sharded.placement.switch(Q, 0, 1)  # then a crash before the drain
    [progress] = QueueMove(sharded, Q, 1, settle=0.1, poll=0.05, drain_timeout=5).run()
    assert progress.copied == 5 and progress.step == "done"
    assert sorted(target.queues[Q].jobs.waiting(0, 100)) == sorted(
        jids + [f"late-{jid}" for jid in jids[:5]])
    assert left_on(sharded, source.shard or "") == {}
    assert QueueMove(sharded, Q, 1).run() == []  # nothing left anywhere: a no-op


def test_a_dependency_ties_a_job_to_its_shard(sharded: ShardedClient) -> None:
    source = sharded.shard(0)
    sharded.placement.record("other", 0)
    dep = source.queues[Q].put("K", {})
    source.queues["other"].put("K", {}, jid="child", depends=[dep])
    move = QueueMove(sharded, Q, 1, settle=0.1, drain_timeout=1)
    with pytest.raises(MoveBlocked, match=f"job {dep} of 'mv' is a dependency of child"):
        move.run()
    assert source.jobs.get(dep) is not None and sharded.shard(1).jobs.get(dep) is None
    assert sharded.placement.moving()[Q]["to"] == sharded.tags[1]
    with pytest.raises(MoveBlocked, match="marked moving to"):
        QueueMove(sharded, Q, 2).run()
    sharded.placement.clear_moving(Q)
    source.queues[Q].unpause()


def test_the_command_line(cluster: LocalCluster, sharded: ShardedClient) -> None:
    sharded.shard(0).queues[Q].put("K", {})
    urls = [f"redis://127.0.0.1:{node.port}" for node in cluster.primaries()]
    out, err = io.StringIO(), io.StringIO()
    code = main([Q, "--to", "s4", "--shards", "6", *sum([["--cluster", u] for u in urls], [])],
                out=out, err=err)
    assert code == 0, err.getvalue()
    assert "mv s0-320 -> s4-328: done; copied 1" in out.getvalue()
    assert sharded.shard(4).queues[Q].peek() is not None
    assert sharded.shard_of(Q) == sharded.tags[4]


def test_a_stalled_job_is_copied_and_its_late_worker_is_refused(sharded: ShardedClient) -> None:
    """A job whose lease expired on the source runs on the target; its late worker's
    complete on the source is refused (the one duplicate a move names without a crash)."""
    source, target = sharded.shard(0), sharded.shard(1)
    source.queues[Q].heartbeat = 1
    jid = source.queues[Q].put("K", {})
    late = source.queues[Q].pop()
    assert late is not None
    time.sleep(1.3)  # the lease expires: listed as stalled, still `running`
    assert source.queues[Q].jobs.stalled() == [jid]
    [progress] = QueueMove(sharded, Q, 1, settle=0.1, poll=0.05, drain_timeout=5).run()
    assert progress.copied == 1
    with pytest.raises(QlessError):
        late.complete()
    again = target.queues[Q].pop()
    assert again is not None and again.jid == jid and again.complete() == "complete"


def test_a_throttle_homed_elsewhere_blocks_the_move(sharded: ShardedClient) -> None:
    source = sharded.shard(0)
    jid = source.queues[Q].put("K", {}, throttles=["api"])  # api's home: s0
    with pytest.raises(MoveBlocked, match=f"job {jid} names throttle 'api', whose home is "
                                          f"shard {sharded.tags[0]}"):
        QueueMove(sharded, Q, 1, settle=0.1, drain_timeout=1).run()
    assert source.jobs.get(jid) is not None and sharded.shard(1).jobs.get(jid) is None


def test_a_resume_after_the_switch_finishes_a_fenced_source_with_nothing_left(
        sharded: ShardedClient) -> None:
    """A mover that crashed right after the switch, with every job already copied, left q
    paused and listed on the source: the resumed move unpauses and forgets it there."""
    source, target = sharded.shard(0), sharded.shard(2)
    for n in range(3):
        source.queues[Q].put("K", {"n": n})
    move = QueueMove(sharded, Q, 2, settle=0.1, poll=0.05, drain_timeout=5)
    sharded.placement.mark_moving(Q, 2)
    move.fence(sharded.tags[0])
    move.copy_rounds(sharded.tags[0], MoveProgress(Q, sharded.tags[0], sharded.tags[2]))
    sharded.placement.switch(Q, 0, 2)  # the crash: nothing left on the source, still fenced
    assert left_on(sharded, sharded.tags[0]) == {} and source.queues[Q].paused
    [progress] = QueueMove(sharded, Q, 2, settle=0.1, poll=0.05, drain_timeout=5).run()
    assert progress.step == "done" and progress.copied == 0
    assert not source.queues[Q].paused
    assert Q not in source.queues.names()
    assert len(target.queues[Q].jobs.waiting(0, 10)) == 3
    assert QueueMove(sharded, Q, 2).run() == []  # finished: nothing left to resume


def test_a_resume_after_the_switch_waits_for_clients_that_missed_it(
        cluster: LocalCluster, sharded: ShardedClient) -> None:
    """A client whose cached placement predates the switch puts on the source until its
    cache runs out; a move resumed after the switch waits `settle` before its final drain,
    as the uninterrupted move does after switching, so those jobs are copied, not stranded
    on a source nobody reserves from."""
    source, target = sharded.shard(0), sharded.shard(2)
    client = cluster.client()
    late = ShardedClient(client, shards=6, worker_name="late")
    late.placement.cache_seconds = 0.6
    try:
        assert late.shard_of(Q) == sharded.tags[0]  # cached: s0 for the next 0.6 s
        early = [source.queues[Q].put("K", {}) for _ in range(3)]
        move = QueueMove(sharded, Q, 2, settle=1.0, poll=0.05, drain_timeout=5)
        sharded.placement.mark_moving(Q, 2)
        move.fence(sharded.tags[0])
        sharded.placement.switch(Q, 0, 2)  # the crash, right after the switch
        producer = LateProducer(late, sharded.tags[2])
        producer.start()
        [progress] = QueueMove(sharded, Q, 2, settle=1.0, poll=0.05, drain_timeout=5).run()
        producer.join(10)
        assert not producer.errors, producer.errors
        put = producer.put
        assert len(put) > 5  # (puts went on for the 0.6 s of its cache)
        assert left_on(sharded, sharded.tags[0]) == {}
        assert progress.step == "done" and progress.copied == len(early) + len(put) - 1
        assert sorted(target.queues[Q].jobs.waiting(0, 500)) == sorted(early + put)
    finally:
        late.close()
        client.close()


def test_a_queue_put_to_during_every_copy_round_still_switches(sharded: ShardedClient) -> None:
    """A busy queue: a client puts to the source during every copy round (while the
    placement still names the source). The copying before the switch ends once a round
    copies less than a full page; what was put meanwhile is copied by the drain."""
    source, target = sharded.shard(0), sharded.shard(2)
    jids = [source.queues[Q].put("K", {"n": n}) for n in range(300)]  # over one page
    late: list[str] = []

    def producer(progress: MoveProgress) -> None:
        if progress.step == "copying" and sharded.shard_of(Q) == sharded.tags[0]:
            if len(late) >= 20:
                raise AssertionError("still copying before the switch after 20 rounds")
            late.append(source.queues[Q].put("K", {}))

    sharded.placement.cache_seconds = 0  # (the producer sees the switch at once)
    [progress] = QueueMove(sharded, Q, 2, settle=0.1, poll=0.05, drain_timeout=5,
                           report=producer).run()
    assert 0 < len(late) < 20 and progress.step == "done"
    assert progress.copied == len(jids) + len(late)
    assert sorted(target.queues[Q].jobs.waiting(0, 500)) == sorted(jids + late)
    assert left_on(sharded, sharded.tags[0]) == {}
