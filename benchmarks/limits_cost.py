"""What a cron schedule and a rate limit add per job, and what a limited queue's idle worker
costs Redis while it waits for the window: the "limits" rows of `make bench`.

- **Cron schedule** (schedule_cost.py): a `* * * * *` schedule on a test clock against
  putting the same job by hand; per job: Redis commands (the engine's own included), Redis
  main-thread CPU µs, and with valgrind the instructions (redis-server under callgrind).
- **Rate limit** (rate_limit_cost.py): pops from a queue without a limit, with a queue limit,
  a keyed queue limit and a limit on the job class, each always with room; per pop: commands,
  CPU µs, and with valgrind the instructions.
- **Waiting for the window**: the core worker (1 child) serves a queue limited to one job per
  window with jobs waiting; after the first job ran, the commands Redis runs over the rest
  of the window are counted (INFO commandstats; our own INFO left out), and the second job's
  start is compared with the window's opening.

Usage: `.venv/bin/python benchmarks/limits_cost.py [--quick] [--no-callgrind]`; `run.py`
runs it after its idle section (`--skip-limits`; `--limits-only` runs only this).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "adapters"), str(HERE.parent)]

import idle_cost  # noqa: E402
import rate_limit_cost  # noqa: E402
import redis  # noqa: E402
import schedule_cost  # noqa: E402
from callgrind_redis import CallgrindError, callgrind_redis  # noqa: E402

from django_qless.core.client import Client  # noqa: E402
from testservers.redis_server import RedisServer, find_redis_server  # noqa: E402

__all__ = ["format_limits", "measure", "wait_cost"]

QUEUE = "limited"
KLASS = "bench.idle_noop"  # registered by idle_cost.py, which the worker imports


def _schedule(url: str, ticks: int) -> dict[str, Any]:
    """Return commands and CPU µs per job of a cron tick and of a job put by hand."""
    cpu: dict[str, float] = {}
    counts = schedule_cost.measure(url, ticks, cpu_us=cpu)
    tick = sum(counts[schedule_cost.TICK].values()) + sum(counts[schedule_cost.TOP_UP].values())
    return {
        "with": {"commands": tick / ticks,
                 "redis_us": (cpu[schedule_cost.TICK] + cpu[schedule_cost.TOP_UP]) / ticks},
        "without": {"commands": sum(counts[schedule_cost.BASE].values()) / ticks,
                    "redis_us": cpu[schedule_cost.BASE] / ticks},
        "idle_check_commands": sum(counts[schedule_cost.IDLE].values()),
    }


def _schedule_instructions(binary: str, ticks: int) -> dict[str, float]:
    """Return instructions per job of a cron tick (top-ups included) and of a put job."""
    with callgrind_redis(binary, prefix="bench-cg-cron-") as server:
        schedule_cost.measure(server.url, ticks, server)
        server.stop()
        instr = schedule_cost.instructions(server)
    return {"with": (instr.get(schedule_cost.TICK, 0) + instr.get(schedule_cost.TOP_UP, 0))
            / ticks, "without": instr.get(schedule_cost.BASE, 0) / ticks}


def _started(client: Client, jid: str) -> float | None:
    """Return now if `jid` left the waiting state, else None."""
    job = client.find_job(jid)
    return time.time() if job is not None and job.state != "waiting" else None


def _until(check: Any, timeout: float, what: str, step: float = 0.05) -> Any:
    """Poll `check` (this harness's own wait, not the worker's) until it returns a value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value is not None:
            return value
        time.sleep(step)
    raise RuntimeError(f"timed out waiting for {what}")


def wait_cost(url: str, window: float) -> dict[str, Any]:
    """Count what Redis runs while a limited queue's idle worker waits for its window."""
    r = redis.Redis.from_url(url, decode_responses=True)
    r.flushall()
    client = Client(url)
    period = window + 4.0  # the first job's start opens it; a margin before and after
    client.rate_limits.set("queue", QUEUE, f"1/{period:g}s")
    queue = client.queues[QUEUE]
    jids = [queue.put(KLASS, {"i": i}) for i in range(3)]
    log_path = os.path.join(tempfile.gettempdir(), f"limits-cost-{os.getpid()}.log")
    with idle_cost.core_worker(url, 1, log_path, QUEUE):
        _until(lambda: _started(client, jids[0]), 60, "the first job")
        time.sleep(1.5)  # its completion and the worker's next ask for work
        status = client.rate_limits.get("queue", QUEUE)
        assert status is not None
        opens = time.time() + status.opens_in
        before = rate_limit_cost._calls(r)
        started = time.time()
        time.sleep(window)
        spent = time.time() - started
        after = rate_limit_cost._calls(r)
        waited = _started(client, jids[1])
        # (polled every 5 ms: the start is known to about that)
        second = _until(lambda: _started(client, jids[1]), period + 30, "the second job", 0.005)
    client.close()
    r.close()
    return {"seconds": round(spent, 2), "commands": after - before - 1,
            "popped_during_window": waited is not None,
            "start_after_opening_ms": round((second - opens) * 1000, 1)}


def measure(binary: str, *, ticks: int = 640, pops: int = 2000, window: float = 10.0,
            callgrind: bool = True) -> dict[str, Any]:
    """Run every part on a private server (and callgrind's, where valgrind is at hand)."""
    doc: dict[str, Any] = {"ticks": ticks, "pops": pops}
    with RedisServer(binary) as server:
        doc["schedule"] = _schedule(server.url, ticks)
        doc["rate"] = rate_limit_cost.timed(server.url, pops)
        doc["wait"] = wait_cost(server.url, window)
    if callgrind and shutil.which("valgrind"):
        try:
            doc["schedule_instr"] = _schedule_instructions(binary, min(ticks, 320))
            doc["rate_instr"] = rate_limit_cost.measure(binary, 200, "fcall",
                                                        rate_limit_cost.VARIANTS)
        except (CallgrindError, SystemExit) as exc:
            doc["callgrind_skipped"] = str(exc)
    return doc


def format_limits(doc: dict[str, Any]) -> str:
    """Return the limits rows: per job with and without, and the wait."""
    lines = [f"cron schedule and rate limit, per job (Redis commands incl. the engine's own / "
             f"Redis CPU µs / instructions; {doc['ticks']} ticks, {doc['pops']} pops):"]

    def row(label: str, cost: dict[str, float], instr: float | None) -> str:
        text = "–" if instr is None else f"{instr / 1000:.1f}k"
        return (f"  {label:44} {cost['commands']:6.2f} / {cost['redis_us']:6.1f} µs / "
                f"{text:>7}")

    sched, sched_ir = doc["schedule"], doc.get("schedule_instr", {})
    lines.append(row("job put by hand, popped, completed", sched["without"],
                     sched_ir.get("without")))
    lines.append(row("cron tick (* * * * *), popped, completed", sched["with"],
                     sched_ir.get("with")))
    rate_ir = doc.get("rate_instr", {})
    names = {"none": "pop, no rate limit", "queue": "pop, queue limit",
             "keyed": "pop, queue limit per key (20 keys)", "kind": "pop, limit on the job class"}
    for variant, cost in doc["rate"].items():
        lines.append(row(names.get(variant, variant), cost, rate_ir.get(variant)))
    lines.append(f"  a worker's check with no schedule due: {sched['idle_check_commands']} "
                 f"command(s) every 5 minutes")
    wait = doc["wait"]
    lines.append(
        f"waiting for a rate limit's window (1 worker child, jobs waiting over the limit): "
        f"{wait['commands']} Redis commands in {wait['seconds']:g} s; the next job started "
        f"{wait['start_after_opening_ms']:g} ms after its window opened (polled every 5 ms)"
        + ("" if not wait["popped_during_window"] else " (popped DURING the window!)"))
    if doc.get("callgrind_skipped"):
        lines.append(f"  (instructions skipped: {doc['callgrind_skipped']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer ticks and pops, a 5 s window")
    p.add_argument("--no-callgrind", action="store_true", help="skip the instruction counts")
    p.add_argument("--redis-server", default=None)
    args = p.parse_args(argv)
    binary = args.redis_server or find_redis_server()
    quick = {"ticks": 128, "pops": 500, "window": 5.0} if args.quick else {}
    print(format_limits(measure(binary, callgrind=not args.no_callgrind, **quick)))  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
