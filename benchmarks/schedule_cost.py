"""What a cron schedule costs Redis per tick, next to putting the same job by hand.

Usage: `.venv/bin/python benchmarks/schedule_cost.py [--ticks 600] [--redis-server PATH]`.

A `* * * * *` schedule on a test clock: every tick the clock moves a minute, a worker pops
the child the engine spawns and completes it. The baseline does what an application
without schedules would: put the job, pop it, complete it. Redis commands are counted with
INFO commandstats deltas (the engine's own commands included), per tick, by command. The
top-up workers do now and then (`keep_schedules`: every 32 ticks of this schedule) is
counted apart, and amortised per tick; so is the check a worker makes every 5 minutes
when no schedule needs ticks. Load-robust: command counts do not depend on the machine.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import redis  # noqa: E402

from django_qless.core import Client  # noqa: E402
from django_qless.core.schedules import Schedules  # noqa: E402
from testservers.redis_server import RedisServer, find_redis_server  # noqa: E402

KLASS = "bench.noop"
START = 1_800_000_000.0  # a whole minute


class Clock:
    """The test clock the client sends as `now`."""

    def __init__(self) -> None:
        self.at = START

    def __call__(self) -> float:
        return self.at


def counted(conn: redis.Redis, action: Callable[[], object]) -> Counter[str]:
    """Run `action`; return the Redis commands it caused, by name (INFO itself left out)."""

    def stats() -> Counter[str]:
        raw = conn.info("commandstats")
        return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in raw.items()})

    before = stats()
    action()
    after = stats()
    after.subtract(before)
    after["info"] = 0
    return +after


def measure(url: str, ticks: int) -> dict[str, Counter[str]]:
    """Count the scheduled run, the baseline, the top-ups and the idle check."""
    conn = redis.Redis.from_url(url, decode_responses=True)
    clock = Clock()
    client = Client(url, worker_name="bench", _clock=clock)
    queue = client.queues["bench"]
    schedules = Schedules(client)
    out: dict[str, Counter[str]] = {}
    refills: Counter[str] = Counter()

    conn.flushall()
    schedules.register("every-minute", KLASS, cron="* * * * *", queue="bench")

    def scheduled(count: int) -> None:
        for _ in range(count):
            clock.at += 60
            job = queue.pop()
            assert job is not None
            job.complete()

    pops: Counter[str] = Counter()
    for done in range(0, ticks, 32):
        chunk = min(32, ticks - done)
        pops += counted(conn, lambda: scheduled(chunk))  # noqa: B023 - called at once
        # What a worker's top-up does once half the 64 ticks handed over are used.
        refills += counted(conn, lambda: schedules.refill(every=True))
    out["schedule, per tick"] = pops
    out["top-up, per tick (every 32 ticks)"] = refills

    conn.flushall()
    clock.at = START

    def baseline() -> None:
        for i in range(ticks):
            queue.put(KLASS, {}, jid=f"job-{i}")
            clock.at += 60
            job = queue.pop()
            assert job is not None
            job.complete()

    out["put by hand, per job"] = counted(conn, baseline)
    out["idle check, per 5 min"] = counted(conn, lambda: schedules.refill())
    client.close()
    conn.close()
    return out


def report(results: dict[str, Counter[str]], ticks: int) -> str:
    """Format commands per tick (the idle check: per call)."""
    lines = []
    per = {"idle check, per 5 min": 1}
    for name, counts in results.items():
        n = per.get(name, ticks)
        total = sum(counts.values()) / n
        detail = ", ".join(f"{k} {v / n:.2f}" for k, v in counts.most_common())
        lines.append(f"{name:36s} {total:6.2f} commands  ({detail})")
    sched = sum(results["schedule, per tick"].values()) / ticks
    sched += sum(results["top-up, per tick (every 32 ticks)"].values()) / ticks
    base = sum(results["put by hand, per job"].values()) / ticks
    lines.append(f"{'a cron tick vs a put job':36s} {sched - base:+6.2f} commands per tick")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=640)
    parser.add_argument("--redis-server", default=None)
    args = parser.parse_args(argv)
    binary = args.redis_server or find_redis_server()
    with RedisServer(binary) as server:
        text = report(measure(server.url, args.ticks), args.ticks)
    print(text)  # noqa: T201 - the benchmark's output
    return text


if __name__ == "__main__":
    main()
