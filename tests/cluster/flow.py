"""Jobs flowing through a ShardedClient while a test breaks the cluster, with a ledger.

`Flow` runs producer threads putting jobs (jids chosen here, so a put whose reply was lost
is still known by name) into queues on several shards, and consumer threads reserving and
completing them on each queue's shard client. Every call's outcome goes into an in-memory
ledger, outside Redis, so no fault of the cluster can touch it. `Flow.check` then reads the
final state of every job from its shard's primary and explains each difference between
what was acknowledged and what the cluster holds; the tests end with the core audit of
every shard.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django_qless.core.client import Client
from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.cluster.transport import NotDurable, NotRun
from django_qless.core.exceptions import QlessConnectionError, QlessError

__all__ = ["Flow", "Run", "Summary", "wait_until"]

# A put or complete that raised one of these may or may not have taken effect.
UNKNOWN = "unknown"
NOT_DURABLE = "not durable"
NOT_RUN = "not run"
ACKED = "acked"
REFUSED = "refused"


def wait_until(check: Callable[[], object], timeout: float, what: str) -> None:
    """Poll `check` until it is true; fail the test with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


@dataclass
class Run:
    """One reservation of a job by a consumer, and how its complete ended."""

    worker: str
    outcome: str = ""
    at: float = 0.0  # monotonic time the complete returned or raised


@dataclass
class Summary:
    """What the ledger and the cluster say at the end of a flow."""

    acked: int = 0
    unacked: dict[str, int] = field(default_factory=dict)  # put outcome -> count
    lost_puts: list[str] = field(default_factory=list)  # acknowledged, not in the cluster
    lost_after_running: int = 0  # of those, jobs a consumer had already run and completed
    not_done: dict[str, str] = field(default_factory=dict)  # jid -> final state
    duplicates: dict[str, int] = field(default_factory=dict)  # reason -> extra runs
    unexplained: list[str] = field(default_factory=list)  # jids run twice for no reason
    reserve_errors: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        return (f"{self.acked} puts acknowledged, not acknowledged {self.unacked}, "
                f"{len(self.lost_puts)} acknowledged puts lost ({self.lost_after_running} of them "
                f"after they ran), not done {self.not_done}, "
                f"extra runs by reason {self.duplicates}, unexplained {self.unexplained}, "
                f"reserve errors {self.reserve_errors}")


class Flow:
    """Producers and consumers of `total` jobs over `queues` (each on its own shard)."""

    def __init__(self, sharded: ShardedClient, queues: list[str], total: int = 2000,
                 producers: int = 3, consumers: int = 3, klass: str = "K",
                 pace: float = 0.0) -> None:
        """`consumers=0`: something else (a real worker) runs the jobs of class `klass`;
        `pace`: seconds each producer sleeps after a put (so puts outlast a failover)."""
        self.sharded, self.queues, self.total, self.klass = sharded, queues, total, klass
        self.pace = pace
        # Resolved once: the placement record must not be read mid-fault.
        self.clients: dict[str, Client] = {q: sharded.for_queue(q) for q in queues}
        self.puts: dict[str, tuple[str, str, float]] = {}  # jid -> (queue, outcome, at)
        self.runs: dict[str, list[Run]] = {}
        self.reserve_errors: dict[str, int] = {}
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.producers = [threading.Thread(target=self._produce, args=(n, producers),
                                           daemon=True) for n in range(producers)]
        self.consumers = [threading.Thread(target=self._consume, args=(f"c{n}",), daemon=True)
                          for n in range(consumers)]

    # -- the threads ---------------------------------------------------------------------

    def _produce(self, n: int, step: int) -> None:
        for i in range(n, self.total, step):
            name = self.queues[i % len(self.queues)]
            jid = f"e{i:05d}"
            try:
                self.clients[name].queues[name].put(self.klass, {"i": i}, jid=jid)
                outcome = ACKED
            except NotRun:  # refused everywhere until the time ran out: did not run
                outcome = NOT_RUN
            except QlessConnectionError:  # the reply was lost: it may have run
                outcome = UNKNOWN
            except NotDurable:  # ran on the primary, no replica confirmed it
                outcome = NOT_DURABLE
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.errors.append(exc)
                return
            with self.lock:
                self.puts[jid] = (name, outcome, time.monotonic())
            if self.pace:
                time.sleep(self.pace)

    def _consume(self, worker: str) -> None:
        turn = 0
        while not self.stop.is_set():
            got = False
            for offset in range(len(self.queues)):
                name = self.queues[(turn + offset) % len(self.queues)]
                got = self._one(worker, name) or got
            turn += 1
            if not got:
                time.sleep(0.01)

    def _one(self, worker: str, name: str) -> bool:
        """Reserve one job of queue `name` for `worker` and complete it; True if one came."""
        client = self.clients[name]
        try:
            jobs, _ = client.reserve([name], 1, worker=worker)
        except (QlessConnectionError, NotDurable) as exc:
            # A lost or unconfirmed pop: its job (if any) comes back when its lease expires.
            with self.lock:
                kind = type(exc).__name__
                self.reserve_errors[kind] = self.reserve_errors.get(kind, 0) + 1
            time.sleep(0.05)
            return False
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)
            self.stop.set()
            return False
        if not jobs:
            return False
        job = jobs[0]
        run = Run(worker)
        with self.lock:
            self.runs.setdefault(job.jid, []).append(run)
        try:
            job.complete()  # replays itself once after a lost reply (attempt token)
            run.outcome = ACKED
        except NotDurable:
            run.outcome = NOT_DURABLE
        except QlessConnectionError:
            run.outcome = UNKNOWN
        except QlessError:  # the lock was lost: handed to someone else meanwhile
            run.outcome = REFUSED
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)
            self.stop.set()
        run.at = time.monotonic()
        return True

    def add_ledger_runs(self, rows: list[dict[str, object]], offset: float) -> None:
        """Record the runs a real worker wrote to a tests/faults ledger (`started` and
        `done` rows; `offset` turns their wall-clock times into monotonic ones): a run with a
        `done` row counts as completed then, one without as ended with an unknown outcome."""
        done = {(r["jid"], r["attempt"]): float(str(r["t"])) for r in rows
                if r["event"] == "done"}
        for row in sorted(rows, key=lambda r: float(str(r["t"]))):
            if row["event"] != "started":
                continue
            at = done.get((row["jid"], row["attempt"]))
            run = Run(str(row["pid"]), ACKED if at is not None else UNKNOWN,
                      (at if at is not None else float(str(row["t"]))) - offset)
            self.runs.setdefault(str(row["jid"]), []).append(run)

    # -- driving it ----------------------------------------------------------------------

    def acked(self) -> int:
        """Return how many puts were acknowledged so far."""
        with self.lock:
            return sum(1 for _, outcome, _ in self.puts.values() if outcome == ACKED)

    def drained(self) -> bool:
        """Tell whether every producer finished and no queue holds a job (a stale lock
        counts as running until its lease expires and a consumer takes the job again)."""
        if self.errors:
            return True
        if any(t.is_alive() for t in self.producers):
            return False
        try:
            return all(self.clients[q].queues[q].length == 0 for q in self.queues)
        except (QlessConnectionError, NotDurable):
            return False

    @contextmanager
    def running(self, fault_after: float = 1 / 3, drain_timeout: float = 60) -> Iterator[Flow]:
        """Start the threads, yield once `fault_after` of the puts are acknowledged (the
        caller breaks the cluster there), then wait until every job is done and stop."""
        for thread in self.consumers + self.producers:
            thread.start()
        try:
            wait_until(lambda: self.acked() >= self.total * fault_after or self.errors
                       or not any(t.is_alive() for t in self.producers), 60, "puts to flow")
            yield self
            wait_until(self.drained, drain_timeout, "the queues to drain")
        finally:
            self.stop.set()
            for thread in self.consumers + self.producers:
                thread.join(timeout=30)
        assert self.errors == [], self.errors
        assert not any(t.is_alive() for t in self.consumers + self.producers)

    # -- the verdict ---------------------------------------------------------------------

    def states(self) -> dict[str, str | None]:
        """Return every put jid's state as its shard's primary holds it (None: no job)."""
        found: dict[str, str | None] = {}
        for name, client in self.clients.items():
            jids = [jid for jid, (q, _, _) in self.puts.items() if q == name]
            pipe = client.node_redis().pipeline(transaction=False)
            for jid in jids:
                pipe.hget(client.keyspace.key("j:" + jid), "state")
            found.update(zip(jids, pipe.execute(), strict=True))
        return found

    def check(self, undone_shard: str | None = None, undone_until: float = 0.0) -> Summary:
        """Compare the ledger with the cluster. A complete acknowledged on `undone_shard`'s
        queue before `undone_until` may have been undone by a failover (asynchronous
        replication), which explains a second run; every other second run must follow a
        complete whose outcome was not acknowledged."""
        states = self.states()
        summary = Summary(reserve_errors=dict(self.reserve_errors))
        for jid, (_, outcome, _) in sorted(self.puts.items()):
            if outcome != ACKED:
                summary.unacked[outcome] = summary.unacked.get(outcome, 0) + 1
                continue
            summary.acked += 1
            state = states[jid]
            if state is None:
                summary.lost_puts.append(jid)
                if any(run.outcome == ACKED for run in self.runs.get(jid, [])):
                    summary.lost_after_running += 1
            elif state != "complete" or (self.consumers and not self.runs.get(jid)):
                summary.not_done[jid] = str(state)
        for jid, runs in self.runs.items():
            name = self.puts[jid][0] if jid in self.puts else ""
            for run in runs[:-1]:
                reason = run.outcome
                if run.outcome == ACKED:
                    undone = (undone_shard is not None and self.clients[name].shard ==
                              undone_shard and run.at <= undone_until)
                    reason = "undone by failover" if undone else ""
                if reason:
                    summary.duplicates[reason] = summary.duplicates.get(reason, 0) + 1
                else:
                    summary.unexplained.append(jid)
        return summary
