"""Where put -> job start goes with idle children: the hand-off path, stage by stage.

    python benchmarks/handoff_latency.py [--children 1,100] [--samples 200] [--redis-server P]
        [--worker-arg=--leader-hold=0 ...] [--bursts R | --cold R]

Per child count: a private redis-server (unix socket), `python -m django_qless.core.workers
-n N --import handoff_probe_jobs probe`, settled and warmed up, then `samples` puts 50-150 ms
apart (seeded), each job carrying its put time. handoff_probe_jobs.py stamps, in the child,
when its poll() returned, when the hand-off message was decoded, when the job loop's
`_perform` and the runner's `run` began, and when the body ran; the driver stamps each put's
call and return. All stamps are `time.monotonic()` (system-wide on Linux). Printed: the
median and p90 of each step, in ms, how many children took the jobs, and the CPU the whole
idle worker (supervisor and children) used per second before the samples. Then, with the
worker still idle, half as many PINGs with the same spacing: the floor (a cold round trip)
under every put -> start.

With `--bursts R` instead: R times, after `--idle` seconds of quiet, one job per child is put
at once (each sleeps 0.5 s, so every child takes one), and the time from the first put to
the last job's start is printed (median and range over the bursts): what waking a whole
idle worker costs, children that closed their connections while waiting (`--idle-disconnect`)
reconnecting included.

With `--cold R` instead (2 children or more; pass a short `--idle-disconnect` with
--worker-arg and a longer `--idle`): R times, after `--idle` seconds of quiet (the waiting
children have let their connections go), a 0.3 s job is put (the leader takes it) and 0-3 ms
later (seeded) a no-op job, whose wake-up ends the leader's hold: the token goes to a child
that must reconnect before it can take the job. Printed: that job's put -> start, p50 / p90 /
p99 / max over the rounds.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from django_qless.core import Client
from testservers.redis_server import RedisServer, find_redis_server

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "adapters"))

from _common import settle_connections  # noqa: E402


def _group_cpu(pgid: int) -> float:
    """Return the CPU seconds (user + system) used so far by the processes of group `pgid`."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # (fields after the name: state, ppid, pgrp, ...)
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def _lines(directory: str) -> dict[str, list[tuple[str, float]]]:
    """Return {jid: [(stamp, time), ...]} in the order the child stamped them."""
    out: dict[str, list[tuple[str, float]]] = {}
    for name in os.listdir(directory):
        for line in Path(directory, name).read_text().splitlines():
            jid, *fields = line.split()
            marks = [(k, float(v)) for k, v in (f.split("=", 1) for f in fields)]
            out[jid] = [("pid", float(name)), *marks]
    return out


def _wait(directory: str, n: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("worker exited")
        if len(_lines(directory)) >= n:
            return
        time.sleep(0.05)
    raise TimeoutError(f"only {len(_lines(directory))} of {n} jobs ran")


@contextmanager
def probe_worker(url: str, children: int, worker_args: tuple[str, ...]
                 ) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """Run the probe worker on a flushed Redis, its connections settled; yield it and the
    stamps' directory; stop it (and remove the stamps) afterwards."""
    tsdir = tempfile.mkdtemp(prefix="handoff-ts-")
    env = dict(os.environ, HANDOFF_TS_DIR=tsdir,
               PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    r = redis.Redis.from_url(url)
    r.flushall()
    proc = subprocess.Popen(
        [sys.executable, "-m", "django_qless.core.workers", "--url", url, "-n", str(children),
         "--import", "handoff_probe_jobs", *worker_args, "probe"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        settle_connections(r, proc, 60.0)
        yield proc, tsdir
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(tsdir, ignore_errors=True)


def measure(url: str, children: int, samples: int, idle: float,
            worker_args: tuple[str, ...] = ()) -> None:
    """Run one worker with `children` idle children and print the per-step breakdown."""
    with probe_worker(url, children, worker_args) as (proc, tsdir):
        q = Client(url).queues["probe"]
        for i in range(3):
            q.put("probe.noop", {"i": i})
        _wait(tsdir, 3, proc)
        cpu0 = _group_cpu(proc.pid)
        time.sleep(idle)
        idle_cpu = (_group_cpu(proc.pid) - cpu0) / idle
        put: dict[str, tuple[float, float]] = {}
        rng = random.Random(42)
        for i in range(samples):
            time.sleep(rng.uniform(0.05, 0.15))
            t0 = time.monotonic()
            jid = q.put("probe.noop", {"i": i, "t0": t0})
            put[jid] = (t0, time.monotonic())
        _wait(tsdir, samples + 3, proc)
        floor = ping_floor(url, samples // 2, rng)
        rows = []
        for jid, marks in _lines(tsdir).items():
            if jid in put:
                rows.append((jid, marks))
    steps = _steps(rows, put)
    pids = {dict(marks)["pid"] for _, marks in rows}
    waiting = sum(0 < dict(marks)["poll_in"] < dict(marks)["t0"] for _, marks in rows)
    print(f"children {children}: {len(rows)} jobs, {len(pids)} children took them, "
          f"{waiting} with the taker already in poll() at the put; load {os.getloadavg()[0]:.2f}; "
          f"idle worker CPU {idle_cpu * 1000:.1f} ms/s over {idle:g} s")
    for label, deltas in steps.items():
        print(f"  {label:34} {_quantiles(deltas)}")
    print(f"  {'floor: a PING spaced the same':34} {_quantiles(floor)}")


def ping_floor(url: str, samples: int, rng: random.Random) -> list[float]:
    """Return `samples` PING round trips (ms), 50-150 ms apart like the puts: the machine's
    price of waking Redis and then the client, which every put -> start pays first."""
    r = redis.Redis.from_url(url)
    r.ping()
    out = []
    for _ in range(samples):
        time.sleep(rng.uniform(0.05, 0.15))
        t0 = time.monotonic()
        r.ping()
        out.append((time.monotonic() - t0) * 1000)
    r.close()
    return out


def _steps(rows: list[tuple[str, list[tuple[str, float]]]],
           put: dict[str, tuple[float, float]]) -> dict[str, list[float]]:
    """Return {step: [ms, ...]}: each job's put call, put reply and stamps, step by step."""
    steps: dict[str, list[float]] = {}
    for jid, marks in rows:
        seq = [("put call", put[jid][0]), ("put reply", put[jid][1])]
        seq += [(k, t) for k, t in marks if k not in ("pid", "t0", "poll_in")]
        for (a, ta), (b, tb) in zip(seq, seq[1:], strict=False):
            steps.setdefault(f"{a} -> {b}", []).append((tb - ta) * 1000)
        body = dict(marks)["body"]
        steps.setdefault("total: put call -> body", []).append((body - put[jid][0]) * 1000)
    return steps


def _quantiles(values: list[float]) -> str:
    """Return "p50 .. p90 .. p99 .. ms (n=..)" for `values` (ms)."""
    values = sorted(values)

    def at(q: float) -> float:
        return values[min(len(values) - 1, round(q * (len(values) - 1)))]

    return (f"p50 {statistics.median(values):6.3f}  p90 {at(0.9):6.3f}  p99 {at(0.99):6.3f} ms"
            f"  (n={len(values)})")


def cold(url: str, children: int, rounds: int, idle: float,
         worker_args: tuple[str, ...] = ()) -> None:
    """Hand a job to a child that let its connections go, `rounds` times; print put -> start."""
    rng = random.Random(42)
    put: dict[str, tuple[float, float]] = {}
    with probe_worker(url, children, worker_args) as (proc, tsdir):
        q = Client(url).queues["probe"]
        for i in range(3):
            q.put("probe.noop", {"i": i})
        _wait(tsdir, 3, proc)
        done = 3
        for _ in range(rounds):
            time.sleep(idle)
            q.put("probe.noop", {"nap": 0.3})  # (the leader's: longer than its hold)
            lag = rng.uniform(0.0, 0.003)
            time.sleep(lag)
            t0 = time.monotonic()
            jid = q.put("probe.noop", {"t0": t0})
            put[jid] = (t0, time.monotonic())
            done += 2
            _wait(tsdir, done, proc)
        rows = [(jid, marks) for jid, marks in _lines(tsdir).items() if jid in put]
    steps = _steps(rows, put)
    waits = steps["total: put call -> body"]
    print(f"children {children}, {rounds} cold hand-overs after {idle:g} s idle "
          f"{' '.join(worker_args)}: max {max(waits):.3f} ms; load {os.getloadavg()[0]:.2f}")
    for label, deltas in steps.items():
        if len(deltas) * 5 >= len(rows):  # (steps most hand-overs went through)
            print(f"  {label:34} {_quantiles(deltas)}")


def bursts(url: str, children: int, rounds: int, idle: float,
           worker_args: tuple[str, ...] = ()) -> None:
    """Wake a whole idle worker `rounds` times; print put -> every child started."""
    last: list[float] = []
    middle: list[float] = []
    with probe_worker(url, children, worker_args) as (proc, tsdir):
        q = Client(url).queues["probe"]
        done = 0
        for _ in range(rounds):
            time.sleep(idle)
            t0 = time.monotonic()
            jids = {q.put("probe.noop", {"t0": t0, "nap": 0.5}) for _ in range(children)}
            done += children
            _wait(tsdir, done, proc)
            starts = sorted(dict(m)["body"] - t0 for j, m in _lines(tsdir).items() if j in jids)
            last.append(starts[-1] * 1000)
            middle.append(statistics.median(starts) * 1000)
            time.sleep(0.6)  # (every nap over: the next quiet starts idle)
    print(f"children {children}, {rounds} bursts after {idle:g} s idle {' '.join(worker_args)}:"
          f" put -> last start p50 {statistics.median(last):.1f} ms ({min(last):.1f}-"
          f"{max(last):.1f}); median start {statistics.median(middle):.1f} ms; load "
          f"{os.getloadavg()[0]:.2f}")


def main() -> None:
    """Parse the arguments and measure each child count on a private Redis."""
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--children", default="1,100")
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--idle", type=float, default=5.0,
                   help="seconds idle before the samples (the worker's CPU is measured)")
    p.add_argument("--redis-server", default=None)
    p.add_argument("--worker-arg", action="append", default=[],
                   help="pass this option to the worker, e.g. --worker-arg=--leader-hold=0")
    p.add_argument("--bursts", type=int, default=0,
                   help="wake the whole idle worker this many times instead (see above)")
    p.add_argument("--cold", type=int, default=0,
                   help="hand this many jobs to a child that let its connections go "
                        "instead (see above)")
    args = p.parse_args()
    with RedisServer(args.redis_server or find_redis_server()) as server:
        for n in (int(c) for c in args.children.split(",")):
            if args.cold:
                cold(server.url, n, args.cold, args.idle, tuple(args.worker_arg))
            elif args.bursts:
                bursts(server.url, n, args.bursts, args.idle, tuple(args.worker_arg))
            else:
                measure(server.url, n, args.samples, args.idle, tuple(args.worker_arg))


if __name__ == "__main__":
    main()
