"""What a cron schedule costs Redis per tick, next to putting the same job by hand.

Usage: `.venv/bin/python benchmarks/schedule_cost.py [--ticks 640] [--callgrind]
[--redis-server PATH]`.

A `* * * * *` schedule on a test clock: every tick the clock moves a minute, a worker pops
the child the engine spawns and completes it. The baseline does what an application
without schedules would: put the job, pop it, complete it. Redis commands are counted with
INFO commandstats deltas (the engine's own commands included), per tick, by command. The
top-up workers do now and then (`keep_schedules`: every 32 ticks of this schedule) is
counted apart, and amortised per tick; so is the check a worker makes every 5 minutes
when no schedule needs ticks. With --callgrind, redis-server runs under callgrind and the
instructions of each part are counted too. Load-robust: command and instruction counts do
not depend on the machine.
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
from callgrind_redis import CallgrindRedis, callgrind_redis  # noqa: E402

sys.path.insert(0, str(HERE / "adapters"))
from _common import redis_cpu  # noqa: E402

from django_qless.core import Client  # noqa: E402
from django_qless.core.scheduling.schedules import Schedules  # noqa: E402
from testservers.redis_server import RedisServer, find_redis_server  # noqa: E402

KLASS = "bench.noop"
TICK = "schedule, per tick"
TOP_UP = "top-up, per tick (every 32 ticks)"
BASE = "put by hand, per job"
IDLE = "idle check, per 5 min"
DUMP_NAMES = {TICK: "tick", TOP_UP: "topup", BASE: "base", IDLE: "idle"}  # callgrind labels
START = 1_800_000_000.0  # a whole minute


class Clock:
    """The test clock the client sends as `now`."""

    def __init__(self) -> None:
        self.at = START

    def __call__(self) -> float:
        return self.at


class Meter:
    """Count what an action costs Redis: commands (INFO commandstats deltas, INFO itself
    left out), Redis's main-thread CPU (`cpu_us`, by label) and, on a server under callgrind,
    instructions (one labelled dump an action)."""

    def __init__(self, conn: redis.Redis, callgrind: CallgrindRedis | None = None) -> None:
        self.conn = conn
        self.callgrind = callgrind
        self.dumps = 0
        self.cpu_us: Counter[str] = Counter()

    def _stats(self) -> Counter[str]:
        raw = self.conn.info("commandstats")
        return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in raw.items()})

    def count(self, label: str, action: Callable[[], object]) -> Counter[str]:
        """Run `action` under label `label`; return its commands by name."""
        before = self._stats()
        if self.callgrind is not None:
            self.callgrind.counting(True)
        cpu = redis_cpu(self.conn)
        action()
        self.cpu_us[label] += (redis_cpu(self.conn) - cpu) * 1e6
        if self.callgrind is not None:
            self.callgrind.counting(False)
            self.dumps += 1
            self.callgrind.control("-d", f"{DUMP_NAMES[label]}-{self.dumps}")
        after = self._stats()
        after.subtract(before)
        after["info"] = 0
        return +after


def measure(url: str, ticks: int, callgrind: CallgrindRedis | None = None,
            cpu_us: dict[str, float] | None = None) -> dict[str, Counter[str]]:
    """Count the scheduled run, the baseline, the top-ups and the idle check; fill `cpu_us`
    with Redis's CPU time of each (µs in all)."""
    conn = redis.Redis.from_url(url, decode_responses=True)
    meter = Meter(conn, callgrind)
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
        pops += meter.count(TICK, lambda: scheduled(chunk))  # noqa: B023 - called at once
        # What a worker's top-up does once half the 64 ticks handed over are used.
        refills += meter.count(TOP_UP, lambda: schedules.refill(every=True))
    out[TICK] = pops
    out[TOP_UP] = refills

    conn.flushall()
    clock.at = START

    def baseline() -> None:
        for i in range(ticks):
            queue.put(KLASS, {}, jid=f"job-{i}")
            clock.at += 60
            job = queue.pop()
            assert job is not None
            job.complete()

    out[BASE] = meter.count(BASE, baseline)
    out[IDLE] = meter.count(IDLE, lambda: schedules.refill())
    if cpu_us is not None:
        cpu_us.update(meter.cpu_us)
    client.close()
    conn.close()
    return out


def instructions(callgrind: CallgrindRedis) -> dict[str, int]:
    """Return the instructions counted under each label (after the server stopped)."""
    totals: Counter[str] = Counter()
    labels = {short: label for label, short in DUMP_NAMES.items()}
    for dump, total in callgrind.dump_totals().items():
        totals[labels[dump.rsplit("-", 1)[0]]] += total
    return dict(totals)


def report(results: dict[str, Counter[str]], ticks: int,
           instr: dict[str, int] | None = None) -> str:
    """Format commands (and instructions) per tick; the idle check: per call."""
    lines = []
    for name, counts in results.items():
        n = 1 if name == IDLE else ticks
        total = sum(counts.values()) / n
        detail = ", ".join(f"{k} {v / n:.2f}" for k, v in counts.most_common())
        cost = f" {instr.get(name, 0) / n / 1000:8.1f}k instr" if instr else ""
        lines.append(f"{name:36s} {total:6.2f} commands{cost}  ({detail})")

    def per_tick(values: dict[str, float]) -> float:
        return (values.get(TICK, 0) + values.get(TOP_UP, 0) - values.get(BASE, 0)) / ticks

    extra = f"{per_tick({k: sum(v.values()) for k, v in results.items()}):+6.2f} commands"
    if instr:
        extra += f", {per_tick(dict(instr)) / 1000:+.1f}k instructions"
    lines.append(f"{'a cron tick vs a put job':36s} {extra} per tick")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=640)
    parser.add_argument("--callgrind", action="store_true",
                        help="also count Redis instructions (redis-server under callgrind)")
    parser.add_argument("--redis-server", default=None)
    args = parser.parse_args(argv)
    binary = args.redis_server or find_redis_server()
    if args.callgrind:
        with callgrind_redis(binary, prefix="bench-cg-cron-") as server:
            results = measure(server.url, args.ticks, server)
            server.stop()
            text = report(results, args.ticks, instructions(server))
    else:
        with RedisServer(binary) as server:
            text = report(measure(server.url, args.ticks), args.ticks)
    print(text)  # noqa: T201 - the benchmark's output
    return text


if __name__ == "__main__":
    main()
