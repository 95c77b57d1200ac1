"""django-qless adapter: the core client (put, put_many, reserve/complete) and core worker CLI."""

from __future__ import annotations

import sys

from _common import main

from django_qless.core import Client

__all__ = ["DjangoQless"]

KLASS = "bench.noop"
BULK_CHUNK = 1000
RESERVE_QUEUES = 100  # the engine's per-call queue limit; the core worker chunks the same way


class DjangoQless:
    """Drive django-qless through its core client API."""

    name = "django-qless"
    multi_queue = True
    notes = {
        "bulk": f"Queue.put_many of {BULK_CHUNK} jobs at a time (one `put.many` engine call per "
        "500 jobs)",
        "drain": "Client.reserve(queues) for the first job, then "
        "Client.complete_and_reserve(job, queues): each call completes one job and pops the next "
        "(one engine call per job, the core worker's path; 100 queues per call, in order)",
        "drain_plain": "Queue.pop() then Job.complete(): two engine calls a job (the plain API)",
        "worker": "`python -m django_qless.core.workers --url URL -n N --import jobs_django_qless "
        "bench` (pre-forked children; complete+reserve in one call, sent without waiting while "
        "the next job, held ahead, runs; an idle child is handed the next job by the put)",
    }

    def __init__(self, url: str, client: Client | None = None) -> None:
        self.url = url
        self.client = client or Client(url)
        self.queues = {}
        self._next = None

    def _queue(self, name: str):  # type: ignore[no-untyped-def]
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = self.client.queues[name]
        return q

    def lean_records(self, on: bool) -> None:
        """Write lean job records in the default keyspace (docs/engine.md) or full ones."""
        if on:
            self.client.config["lean-job-records"] = 1
        else:
            del self.client.config["lean-job-records"]

    def put(self, i: int, t0: float = 0.0, queue: str = "bench") -> None:
        self._queue(queue).put(KLASS, {"i": i, "t0": t0})

    def put_bulk(self, n: int, queue: str = "bench") -> None:
        q = self._queue(queue)
        for start in range(0, n, BULK_CHUNK):
            q.put_many([{"klass": KLASS, "data": {"i": i, "t0": 0.0}}
                        for i in range(start, min(n, start + BULK_CHUNK))])

    def fill(self, n: int, queues: list[str]) -> None:
        self._next = None  # a fill follows a flush: a job held from before is gone
        for start in range(0, n, BULK_CHUNK):
            by_queue: dict[str, list] = {}
            for i in range(start, min(n, start + BULK_CHUNK)):
                by_queue.setdefault(queues[i % len(queues)], []).append(
                    {"klass": KLASS, "data": {"i": i, "t0": 0.0}})
            for name, jobs in by_queue.items():
                self._queue(name).put_many(jobs)

    def pop_complete(self, queues: list[str]) -> bool:
        # The job the previous call's complete_and_reserve took (its pop is counted there).
        job, self._next = self._next, None
        if job is None:
            for start in range(0, len(queues), RESERVE_QUEUES):
                jobs, _ = self.client.reserve(queues[start:start + RESERVE_QUEUES])
                if jobs:
                    job = jobs[0]
                    break
        if job is None:
            return False
        # Complete this job and pop the next one in one engine call, as the core worker does.
        _, more, _ = self.client.complete_and_reserve(job, queues[:RESERVE_QUEUES])
        self._next = more[0] if more else None
        return True

    def pop_complete_plain(self, queues: list[str]) -> bool:
        # The plain API, two engine calls a job: Queue.pop() then Job.complete().
        for name in queues:
            job = self._queue(name).pop()
            if job is not None:
                job.complete()
                return True
        return False

    def worker_argv(self, processes: int, queue: str) -> list[str]:
        return [sys.executable, "-m", "django_qless.core.workers", "--url", self.url,
                "-n", str(processes), "--import", "jobs_django_qless", queue]


if __name__ == "__main__":
    main(DjangoQless)
