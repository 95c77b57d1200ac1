"""A real forking worker (`python -m django_qless.core.workers --cluster ...`) serving
queues in several shards while a primary is SIGKILLed, or while its queue moves to another
shard: every job body writes `started` and `done` to a SQLite ledger outside Redis
(tests/faults/jobs.py), and the ledger is checked against what the cluster holds.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.cluster import RedisCluster

from django_qless.core.audit import audit_all
from django_qless.core.cluster.queue_move import MoveProgress, QueueMove
from django_qless.core.cluster.sharded import ShardedClient
from tests.faults.conftest import LEDGER_ENV, Ledger
from tests.helpers import WorkerProcess
from testservers.cluster import LocalCluster

from .flow import Flow, wait_until
from .test_faults_e2e import make_sharded, primary_of, queues_on_each_primary

__all__: list[str] = []

pytestmark = pytest.mark.timeout(180)

SHARDS = 8  # make_sharded's count: the worker must agree on it
WORK = "tests.faults.jobs.work"
LEASE = 2  # seconds (make_sharded sets it on every shard)


@pytest.fixture
def ledger(monkeypatch: pytest.MonkeyPatch) -> Iterator[Ledger]:
    """A fresh SQLite ledger; the worker's job bodies find it through the environment."""
    work_dir = Path(tempfile.mkdtemp(prefix="qless-rworker-"))
    monkeypatch.setenv(LEDGER_ENV, str(work_dir / "ledger.db"))
    yield Ledger(work_dir / "ledger.db")
    shutil.rmtree(work_dir, ignore_errors=True)


@pytest.fixture
def workers(cluster: LocalCluster) -> Iterator[list[WorkerProcess]]:
    """Worker processes a test starts; all killed at teardown."""
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.kill_all()


def start_worker(cluster: LocalCluster, started: list[WorkerProcess], work_dir: Path,
                 queues: list[str]) -> WorkerProcess:
    """Start a forking worker of 2 processes serving `queues` in the cluster's shards."""
    urls = ",".join(f"redis://{n.address}" for n in cluster.primaries())
    worker = WorkerProcess(f"redis://{cluster.primaries()[0].address}",
                           ["--cluster", urls, "--shards", str(SHARDS), "-n", "2",
                            ",".join(queues)],
                           work_dir, jobs_module="tests.faults.jobs", wait_timeout=60)
    started.append(worker)
    worker.wait_children(2, 30)
    return worker


def done_jids(ledger: Ledger) -> set[str]:
    return {str(r["jid"]) for r in ledger.rows("done")}


def assert_clean(sharded: ShardedClient) -> None:
    reports = audit_all(sharded)
    assert sum(r.jobs for r in reports) > 0
    assert [str(r) for r in reports if not r.ok] == []


def test_a_real_worker_rides_out_the_sigkill_of_a_primary(
    cluster: LocalCluster, rc: RedisCluster, ledger: Ledger, workers: list[WorkerProcess],
) -> None:
    """600 jobs over 3 queues on 3 primaries, put over ~8 s; one primary SIGKILLed a
    third of the way in. Every acknowledged put the cluster still holds ran; a second run
    is allowed only for a job of the killed shard whose earlier run ended before the
    promotion plus two leases (its complete was lost or undone, or its lease ran out while
    the shard was down); the worker served every shard afterwards and exits 0 on QUIT."""
    sharded = make_sharded(rc)
    try:
        queues = queues_on_each_primary(sharded, cluster)
        victim_queue = queues[1]
        victim = primary_of(cluster, sharded, victim_queue)
        cluster.wait_settled(10)  # the lease config must be on the replicas
        worker = start_worker(cluster, workers, ledger.path.parent, queues)
        flow = Flow(sharded, queues, total=600, consumers=0, klass=WORK,
                    pace=0.04)
        with flow.running(drain_timeout=90):
            killed_at = time.monotonic()
            cluster.kill_primary(victim)
            promoted_at = time.monotonic()
        acked = {jid for jid, (_, outcome, _) in flow.puts.items() if outcome == "acked"}
        states = flow.states()
        # A job still in the cluster is done in the ledger (the drain saw no job waiting
        # or running; its `done` row is written just before the complete).
        wait_until(lambda: {j for j in acked if states[j] is not None} <= done_jids(ledger),
                   30, "every job in the cluster to be done in the ledger")
        worker.signal(signal.SIGQUIT)
        assert worker.wait(60) == 0
        offset = time.time() - time.monotonic()
        rows = ledger.rows()
        flow.add_ledger_runs(rows, offset)
        summary = flow.check(undone_shard=sharded.shard_of(victim_queue),
                             undone_until=promoted_at + 2 * LEASE)
        print(f"\nreal worker, SIGKILL (promoted after {promoted_at - killed_at:.1f} s): "
              f"{summary}")
        assert summary.not_done == {} and summary.unexplained == [], summary
        assert set(summary.duplicates) <= {"undone by failover", "unknown"}
        for jid in summary.lost_puts:  # only what the killed primary had not replicated
            queue, _, at = flow.puts[jid]
            assert queue == victim_queue and at <= promoted_at, (jid, at - killed_at)
        assert acked - set(summary.lost_puts) <= done_jids(ledger)
        # The worker kept running jobs on every shard after the promotion.
        after = {q: 0 for q in queues}
        for r in rows:
            if r["event"] == "done" and float(str(r["t"])) - offset > promoted_at:
                after[flow.puts[str(r["jid"])][0]] += 1
        print(f"jobs done after the promotion, by queue: {after}")
        assert all(after.values()), after
        assert_clean(sharded)
    finally:
        sharded.close()


def test_a_real_worker_follows_its_queue_moved_to_another_shard(
    cluster: LocalCluster, rc: RedisCluster, ledger: Ledger, workers: list[WorkerProcess],
) -> None:
    """q moves from s0 to s3 while two producers put 300 jobs and a real worker runs them:
    every job runs exactly once (no crash, no lease runs out: docs/scaling.md), nothing of q
    is left on the source, and the worker ran jobs on the target after the switch."""
    q = "mv"
    sharded = ShardedClient(rc, shards=SHARDS)
    sharded.placement.record(q, 0)
    source, target = sharded.tags[0], sharded.tags[3]
    put: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def producer(n: int) -> None:
        mine = ShardedClient(rc, shards=SHARDS)
        mine.placement.cache_seconds = 0.5
        try:
            for i in range(150):
                jid = f"p{n}-{i:03d}"
                mine.for_queue(q).queues[q].put(WORK, {"i": i}, jid=jid)
                with lock:
                    put.append(jid)
                time.sleep(0.02)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    try:
        worker = start_worker(cluster, workers, ledger.path.parent, [q])
        threads = [threading.Thread(target=producer, args=(n,), daemon=True) for n in range(2)]
        for thread in threads:
            thread.start()
        wait_until(lambda: len(done_jids(ledger)) >= 20, 30, "the worker to run jobs on s0")
        steps: list[tuple[str, float]] = []
        # settle: the worker's placement cache (5 s) plus one second, the default.
        move = QueueMove(sharded, q, target, poll=0.05, drain_timeout=60,
                         report=lambda p: steps.append((MoveProgress(**vars(p)).step,
                                                        time.time())))
        [progress] = move.run()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        assert len(put) == 300
        # Bounded well below the worker's 60 s idle re-check (--interval): the jobs on the
        # target must be taken on their wake-ups, not found by the safety net.
        try:
            wait_until(lambda: set(put) <= done_jids(ledger), 20, "every job to run")
        except AssertionError:
            late = sorted(set(put) - done_jids(ledger))
            states = {j: (job.state if (job := sharded.shard(target).jobs.get(j)) else None)
                      for j in late[:5]}
            raise AssertionError(f"{len(late)} jobs not run, on the target: {states}; "
                                 f"worker log: {worker.stderr()[-1500:]}") from None
        worker.signal(signal.SIGQUIT)
        assert worker.wait(60) == 0
        runs: dict[str, int] = {}
        for r in ledger.rows("started"):
            runs[str(r["jid"])] = runs.get(str(r["jid"]), 0) + 1
        print(f"\nreal worker, queue move: copied {progress.copied} in {progress.rounds} "
              f"rounds; {len(runs)} jobs run")
        assert {jid: n for jid, n in runs.items() if n > 1} == {}
        assert sharded.shard_of(q) == target and progress.step == "done"
        counts = sharded.shard(source).queues[q].counts
        assert {k: counts[k] for k in ("waiting", "scheduled", "stalled", "running",
                                       "depends", "recurring") if counts.get(k)} == {}
        switched_at = dict(steps)["switched"]
        on_target = sharded.shard(target)
        after = [r for r in ledger.rows("done") if float(str(r["t"])) > switched_at
                 and (job := on_target.jobs.get(str(r["jid"]))) is not None
                 and job.state == "complete"]
        print(f"{len(after)} jobs of the target shard done after the switch")
        assert after
        assert_clean(sharded)
    finally:
        sharded.close()
