"""Move a queue to another shard while producers and workers go on (docs/scaling.md).

The steps: mark the move; fence the source (pause the queue there, copy its settings);
copy pages of its waiting, scheduled, stalled and throttled jobs to the target with a put
that never replaces a live copy, then cancel them on the source; copy its recurring jobs;
switch the placement; drain the source until no job of the queue is left there; forget it
there. Every step can run again after a crash at any point; `run()` resumes a move from the
markers and what each shard holds.

    python -m django_qless.core.cluster.queue_move --cluster redis://10.0.0.1:6379 --shards 16 \\
        emails --to s5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..client import Client
from ..exceptions import JobExists, QlessError
from ..job import Job
from ..scheduling.schedules import move_schedule
from ..serialization import as_list, carry_options, num, put_options
from .placement import check_queue
from .sharded import ShardedClient

__all__ = ["MoveBlocked", "MoveProgress", "QueueMove", "main"]

# What a copy round takes from the source: jobs nobody holds (stalled: the lease expired).
_COPIED_STATES = ("waiting", "scheduled", "stalled", "throttled")
# What the source may still hold of the queue; the move is over when every count is 0.
_LEFT_STATES = ("waiting", "scheduled", "stalled", "throttled", "running", "depends",
                "recurring")
# Jids per state per round (four states: at most 1000, what one multiget takes).
_PAGE = 250


class MoveBlocked(QlessError):
    """The move cannot go on without the operator (a job tied to the source shard)."""


@dataclass
class MoveProgress:
    """What a move has done so far (reported after every step and copy round)."""

    queue: str
    source: str
    target: str
    step: str = ""
    copied: int = 0  # jobs put on the target (or found there already) and canceled here
    recurring: int = 0  # recurring jobs moved
    rounds: int = 0
    left: dict[str, int] = field(default_factory=dict)  # the source's counts of the queue
    waited: float = 0.0  # seconds waited after the switch for every client to see it

    def line(self) -> str:
        """Return a one-line summary."""
        left = ", ".join(f"{k} {v}" for k, v in self.left.items() if v) or "nothing"
        return (f"{self.queue} {self.source} -> {self.target}: {self.step}; copied "
                f"{self.copied}, recurring {self.recurring}, rounds {self.rounds}; "
                f"waited {self.waited:.2f}s; left on source: {left}")


class QueueMove:
    """One queue's move to shard `to` (an index, `s<i>` or a tag)."""

    def __init__(
        self, sharded: ShardedClient, queue: str, to: int | str, *,
        report: Callable[[MoveProgress], None] | None = None, settle: float | None = None,
        poll: float = 0.2, drain_timeout: float = 3600.0,
    ) -> None:
        """`settle` is how long after the switch every client has seen it (default the
        placement cache time plus one second); `drain_timeout` bounds the wait for running
        jobs on the source."""
        self.sharded = sharded
        self.queue = check_queue(queue)
        self.target = sharded.placement.tag_of(int(to) if str(to).isdigit() else to)
        self._report = report
        self.settle = sharded.placement.cache_seconds + 1.0 if settle is None else settle
        self.poll = poll
        self.drain_timeout = drain_timeout

    # -- the whole procedure --------------------------------------------------------------

    def run(self) -> list[MoveProgress]:
        """Run (or resume) the move to its end; return the progress of each source."""
        placement = self.sharded.placement
        q = self.queue
        pinned = placement.explicit.get(q)
        if pinned is not None:
            raise MoveBlocked(f"{q!r} is pinned to {pinned} by the placement setting: a move "
                              f"needs it unpinned (the setting wins over the recorded shard)")
        marker = placement.moving().get(q)
        recorded = placement.shard_of(q)
        if marker is not None and marker["to"] != self.target:
            raise MoveBlocked(f"{q!r} is marked moving to {marker['to']}, not {self.target}: "
                              f"finish that move, or clear its marker")
        if marker is None and recorded == self.target:
            # Past the switch (or never elsewhere): finish every other shard that still
            # holds jobs of q or still fences it (a crash right after the switch leaves q
            # paused there with nothing left). A client may have cached the old placement
            # until `settle` after the switch: wait what is left of that (all of it when
            # the switch time is not noted).
            since = placement.switched_since(q, self.target)
            left = self.settle if since is None else min(self.settle,
                                                         max(0.0, self.settle - since))
            seen_by = time.monotonic() + left
            sources = [tag for tag in self.sharded.tags
                       if tag != self.target and self._unfinished(tag)]
            done = [self._finish(tag, seen_by=seen_by) for tag in sources]
            placement.forget_switch(q)
            return done
        source = placement.mark_moving(q, self.target)
        progress = MoveProgress(q, source, self.target)
        self._step(progress, "marked")
        done = [self._finish(source, seen_by=None, progress=progress)]
        placement.forget_switch(q)
        return done

    def _finish(self, source: str, *, seen_by: float | None,
                progress: MoveProgress | None = None) -> MoveProgress:
        """Fence `source`, copy its backlog, switch (`seen_by` None; else the switch is done
        and every client has seen it by monotonic time `seen_by`), wait for the clients,
        drain and forget."""
        progress = progress or MoveProgress(self.queue, source, self.target)
        self.fence(source)
        self._step(progress, "fenced")
        # Until the switch, clients still put to the source: a busy queue may never give a
        # round that finds nothing. The backlog goes in full pages; the drain copies the rest.
        self.copy_rounds(source, progress, below=_PAGE)
        self.copy_recurring(source, progress)
        if seen_by is None:
            self.sharded.placement.switch(self.queue, source, self.target)
            self._step(progress, "switched")
            seen_by = time.monotonic() + self.settle
        # Until every client puts to the target, late puts land in the source's paused
        # queue, where the drain finds them; after the forget they would be stranded there.
        progress.waited = max(0.0, seen_by - time.monotonic())
        time.sleep(progress.waited)
        self.drain(source, progress)
        self.forget(source)
        self._step(progress, "done")
        return progress

    # -- the steps ------------------------------------------------------------------------

    def fence(self, source: str) -> None:
        """Pause the queue on `source` and give the target its settings (heartbeat, max
        concurrency, the queue's own throttle), unless the target has its own."""
        src, dst = self.sharded.shard(source), self.sharded.shard(self.target)
        src.queues[self.queue].pause()
        mine = json.loads(dst.call("config.get") or "{}")
        theirs = json.loads(src.call("config.get") or "{}")
        for key in (f"{self.queue}-heartbeat", f"{self.queue}-max-concurrency"):
            if key in theirs and key not in mine:
                dst.call("config.set", key, theirs[key])
        maximum = src.queues[self.queue].throttle.maximum
        if maximum > 0 and dst.queues[self.queue].throttle.maximum == 0:
            dst.queues[self.queue].set_throttle(maximum)

    def copy_round(self, source: str) -> int:
        """Copy one page of each state from `source` to the target, then cancel what was
        copied on `source`; return how many jobs moved."""
        src, dst = self.sharded.shard(source), self.sharded.shard(self.target)
        listed = src.queues[self.queue].jobs
        jids: dict[str, None] = {}
        for state in _COPIED_STATES:
            jids.update(dict.fromkeys(getattr(listed, state)(0, _PAGE)))
        if not jids:
            return 0
        stalled = set(listed.stalled(0, _PAGE))
        jobs = [Job(src, d) for d in as_list(src.call_json("multiget", *jids))]
        # A stalled job is still `running` (its lease expired): copied like a waiting one.
        jobs = [job for job in jobs if job.queue_name == self.queue
                and (job.state in _COPIED_STATES or job.jid in stalled)]
        if not jobs:
            return 0
        due = self._scheduled_times(src, [job.jid for job in jobs])
        now = dst.now()
        puts = []
        for job in jobs:
            self._check_movable(job, source)
            delay = max(0.0, due[job.jid] - now) if job.jid in due else 0.0
            options = put_options(priority=job.priority, tags=list(job.tags),
                                  retries=job.original_retries, depends=None,
                                  throttles=list(job.throttles) or None, jid=job.jid)
            # The copy keeps the job's history and retries left (multiget read them).
            carried = carry_options(job.history,
                                    max(0, min(job.retries, job.original_retries)))
            puts.append(("put", ("", self.queue, job.jid, job.klass_name, job.raw_data,
                                 num(delay), *options, "if-absent", "live", *carried)))
        for job, reply in zip(jobs, dst.pipeline_calls(puts, raise_on_error=False),
                              strict=True):
            if isinstance(reply, QlessError) and not isinstance(reply, JobExists):
                raise MoveBlocked(f"cannot copy job {job.jid} to {self.target}: {reply}")
        tracked = [("track", ("track", job.jid)) for job in jobs if job.tracked]
        if tracked:
            dst.pipeline_calls(tracked)
        replies = src.pipeline_calls([("cancel", (job.jid,)) for job in jobs],
                                     raise_on_error=False)
        for job, reply in zip(jobs, replies, strict=True):
            if isinstance(reply, QlessError):
                raise MoveBlocked(f"copied job {job.jid} but could not cancel it on "
                                  f"{source}: {reply}")
        return len(jobs)

    def copy_rounds(self, source: str, progress: MoveProgress, *, below: int = 1) -> None:
        """Run copy rounds until one copies fewer than `below` jobs (1: finds nothing)."""
        while True:
            moved = self.copy_round(source)
            progress.copied += moved
            progress.rounds += 1
            if moved:
                self._step(progress, "copying")
            if moved < below:
                return

    def copy_recurring(self, source: str, progress: MoveProgress) -> None:
        """Move the queue's recurring jobs: same jid, schedule, next run and spawn count."""
        src, dst = self.sharded.shard(source), self.sharded.shard(self.target)
        while True:
            rjids = src.queues[self.queue].jobs.recurring(0, _PAGE)
            if not rjids:
                return
            for rjid in rjids:
                self._move_recurring(src, dst, rjid)
                progress.recurring += 1
            self._step(progress, "recurring")

    def _move_recurring(self, src: Client, dst: Client, rjid: str) -> None:
        """Recur `rjid` on the target (unless it is there already), then unrecur it here."""
        if move_schedule(src, dst, rjid):
            return  # a cron schedule (schedules.py)
        if dst.call("recur.get", rjid) is None:
            found = src.call_json("recur.get", rjid)
            if found is None:
                return
            nxt = self._score(src, f"q:{self.queue}-recur", rjid)
            # `recur` keeps a template's stored count: write it first, so the children
            # spawned on the target go on from the source's numbering (no jid twice).
            key = dst.keyspace.key(f"r:{rjid}")
            self.sharded.transport.execute(("HSET", key, "count", int(found["count"])),
                                           key=key)
            offset = 0.0 if nxt is None else max(0.0, nxt - dst.now())
            args: list[Any] = [
                self.queue, rjid, found["klass"], found["data"], "interval",
                num(found["interval"]), num(offset), "priority", int(found["priority"]),
                "tags", json.dumps(as_list(found["tags"])), "retries", int(found["retries"]),
                "backlog", int(found["backlog"])]
            if as_list(found.get("throttles")):
                args += ["throttles", json.dumps(as_list(found["throttles"]))]
            dst.call("recur", *args)
        src.call("unrecur", rjid)

    def drain(self, source: str, progress: MoveProgress) -> None:
        """Copy until the source holds no job of the queue (running ones finish there and
        what they put back in the queue is copied); MoveBlocked after `drain_timeout`."""
        deadline = time.monotonic() + self.drain_timeout
        while True:
            self.copy_rounds(source, progress)
            self.copy_recurring(source, progress)
            progress.left = self._left(source)
            if not any(progress.left.values()):
                return
            self._step(progress, "draining")
            if time.monotonic() > deadline:
                raise MoveBlocked(f"{self.queue!r} still has jobs on {source} after "
                                  f"{self.drain_timeout:g}s: {progress.left}")
            time.sleep(self.poll)

    def forget(self, source: str) -> None:
        """Unpause and forget the queue on `source` (a late put there runs there and lists
        the queue again); the move's marker is gone with the switch."""
        src = self.sharded.shard(source)
        src.queues[self.queue].unpause()
        src.queues[self.queue].forget()

    # -- helpers --------------------------------------------------------------------------

    def _check_movable(self, job: Job, source: str) -> None:
        """Refuse a job tied to the source: others depend on it, or it names a throttle
        whose home is not the target."""
        if job.dependents:
            raise MoveBlocked(
                f"job {job.jid} of {self.queue!r} is a dependency of {job.dependents[0]} in "
                f"shard {source}: a job and its dependencies share a shard (move that "
                f"queue too, or undepend)")
        for tid in job.throttles:
            home = self.sharded.throttle_home(tid, self.target)
            if home != self.target:
                raise MoveBlocked(
                    f"job {job.jid} names throttle {tid!r}, whose home is shard {home}: "
                    f"name its home {self.target} (ShardedClient(throttles=...)) first")

    def _scheduled_times(self, client: Client, jids: Sequence[str]) -> dict[str, float]:
        """Return when each scheduled one of `jids` is due (one pipelined read)."""
        key = client.keyspace.key(f"q:{self.queue}-scheduled")

        def read(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for jid in jids:
                pipe.zscore(key, jid)
            result: list[Any] = pipe.execute()
            return result

        scores = client.read(read)
        return {jid: float(s) for jid, s in zip(jids, scores, strict=True) if s is not None}

    def _score(self, client: Client, name: str, member: str) -> float | None:
        """Return the score of `member` in zset `name` of `client`'s keyspace."""
        key = client.keyspace.key(name)
        score = client.read(lambda r: r.zscore(key, member))
        return None if score is None else float(score)

    def _unfinished(self, tag: str) -> bool:
        """Return whether shard `tag` holds jobs of the queue or still fences it."""
        return any(self._left(tag).values()) or self.sharded.shard(tag).queues[self.queue].paused

    def _left(self, source: str) -> dict[str, int]:
        """Return the source's counts of the queue (the states a move must empty)."""
        counts = self.sharded.shard(source).queues[self.queue].counts
        return {state: int(counts.get(state) or 0) for state in _LEFT_STATES}

    def _step(self, progress: MoveProgress, step: str) -> None:
        progress.step = step
        if self._report is not None:
            self._report(progress)


def main(argv: Sequence[str] | None = None, out: Any = None, err: Any = None) -> int:
    """Move a queue to another shard; print progress; exit 0 when done, 1 when blocked."""
    parser = argparse.ArgumentParser(
        prog="python -m django_qless.core.cluster.queue_move",
        description="Move a queue to another shard online (docs/scaling.md).")
    parser.add_argument("queue")
    parser.add_argument("--to", required=True, help="target shard: index, s<i> or tag")
    parser.add_argument("--cluster", action="append", required=True,
                        help="a node URL (repeat for more)")
    parser.add_argument("--shards", type=int, required=True)
    parser.add_argument("--drain-timeout", type=float, default=3600.0)
    args = parser.parse_args(argv)
    out, err = out or sys.stdout, err or sys.stderr
    with ShardedClient(args.cluster, shards=args.shards) as sharded:
        move = QueueMove(sharded, args.queue, args.to, drain_timeout=args.drain_timeout,
                         report=lambda p: out.write(p.line() + "\n"))
        try:
            move.run()
        except MoveBlocked as exc:
            err.write(f"blocked: {exc}\n")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
