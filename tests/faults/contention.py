"""Contention driver: one process of N logical workers (threads), each with its own worker name.

Run as `python -m tests.faults.contention URL PROC THREADS OUTDIR QUEUES...`. Every pop and
every completion attempt is appended (one JSON line, written at once, so SIGKILL loses
nothing already recorded) to OUTDIR/proc-<PROC>.jsonl. A pop row is the ledger entry
`(jid, worker, pop_time, lease_end)`: `before`/`after` bracket the engine call on the server
clock (the engine's own `now` lies between them) and `expires` is the lease end it granted.
Threads stop when the key `contention:stop` (outside the ql:* keys) exists.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time

from django_qless.core.client import Client
from django_qless.core.exceptions import QlessError

__all__ = ["main"]


def main(argv: list[str]) -> None:
    """Run THREADS workers popping one job at a time until the stop key appears."""
    url, proc, threads, outdir, *queues = argv
    client = Client(url)
    fd = os.open(os.path.join(outdir, f"proc-{proc}.jsonl"),
                 os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def record(**row: object) -> None:
        os.write(fd, (json.dumps(row) + "\n").encode())

    def stopped() -> bool:
        return bool(client.redis.exists("contention:stop"))

    def run(index: int) -> None:
        name = f"contention-{proc}-{index}"
        order = queues[index % len(queues):] + queues[:index % len(queues)]
        idle = 0
        while True:
            try:
                # The stop key only matters once the queues drain; checking it on every
                # loop would add a round trip per job under full load.
                if idle or random.random() < 0.01:
                    if stopped():
                        return
                before = client.now()
                jobs, _ = client.reserve(order, 1, worker=name)
                after = client.now()
            except Exception as exc:  # never let a thread die silently
                record(ev="error", worker=name, error=repr(exc)[:200])
                time.sleep(0.05)
                continue
            if not jobs:
                idle += 1
                time.sleep(0.02)
                continue
            idle = 0
            job = jobs[0]
            record(ev="pop", jid=job.jid, worker=name, q=job.queue_name, prio=job.priority,
                   expires=job.expires_at, before=before, after=after)
            time.sleep(random.uniform(0, 0.005))
            try:
                job.complete()
                record(ev="done", jid=job.jid, worker=name, t=client.now())
            except QlessError as exc:
                record(ev="refused", jid=job.jid, worker=name, error=str(exc)[:200])
            except Exception as exc:
                record(ev="error", jid=job.jid, worker=name, error=repr(exc)[:200])

    pool = [threading.Thread(target=run, args=(i,)) for i in range(int(threads))]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    os.close(fd)


if __name__ == "__main__":
    main(sys.argv[1:])
