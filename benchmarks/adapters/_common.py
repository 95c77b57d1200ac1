"""Measurement driver shared by every adapter; runs inside the measured system's venv.

Stdlib + redis-py only (every system's venv has redis-py). An adapter module defines a class
with the methods of ``Adapter`` below and calls ``main(AdapterClass)``; the driver runs the
metrics named on the command line against one Redis URL and prints one JSON object on the
last line of stdout. Every metric starts from a flushed Redis.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import redis

__all__ = ["Adapter", "main", "LINE", "monitor", "redis_cpu", "server_stats"]

HERE = os.path.dirname(os.path.abspath(__file__))
LINE = 36  # bytes per line written by _jobbody.record
IGNORED_COMMANDS = {"info", "config", "flushall", "ping"}


class Adapter:
    """The interface each system implements (documentation; adapters duck-type it)."""

    name = "?"
    notes: dict[str, str] = {}

    def __init__(self, url: str) -> None:
        self.url = url

    def put(self, i: int, t0: float = 0.0, queue: str = "bench") -> None:
        """Enqueue one tiny job with one library call."""
        raise NotImplementedError

    def put_bulk(self, n: int, queue: str = "bench") -> None:
        """Enqueue n jobs with the library's bulk API (optional)."""
        raise NotImplementedError

    def fill(self, n: int, queues: list[str]) -> None:
        """Enqueue n jobs round-robin over queues as fast as possible (untimed setup)."""
        raise NotImplementedError

    def pop_complete(self, queues: list[str]) -> bool:
        """Take one job and finish it without a worker framework; False when none is left."""
        raise NotImplementedError

    def worker_argv(self, processes: int, queue: str) -> list[str]:
        """Return the command line that starts the library's own worker."""
        raise NotImplementedError


def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def _flush(url: str) -> None:
    _redis(url).flushall()


def _per_sec(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def _cpu() -> float:
    """Return this process's user + system CPU seconds so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure_enqueue(a: Any, n: int) -> dict[str, float]:
    """Time n single puts; also the memory growth they caused."""
    _flush(a.url)
    r = _redis(a.url)
    mem0 = int(r.info("memory")["used_memory"])
    cpu0 = _cpu()
    start = time.perf_counter()
    for i in range(n):
        a.put(i)
    elapsed = time.perf_counter() - start
    cpu = _cpu() - cpu0
    mem1 = int(r.info("memory")["used_memory"])
    return {
        "enqueue_jobs_per_s": _per_sec(n, elapsed),
        "enqueue_client_cpu_us_per_job": cpu * 1e6 / n,
        "memory_bytes_per_10k": (mem1 - mem0) * 10_000 / n,
        "memory_bytes_per_job": (mem1 - mem0) / n,
    }


def measure_lean_memory(a: Any, n: int) -> dict[str, float]:
    """The memory growth of n single puts with the adapter's lean records switched on (an
    adapter without `lean_records` has no such variant: nothing measured)."""
    if not hasattr(a, "lean_records"):
        return {}
    _flush(a.url)
    a.lean_records(True)  # (after the flush: the option lives in the engine's config)
    r = _redis(a.url)
    mem0 = int(r.info("memory")["used_memory"])
    for i in range(n):
        a.put(i)
    mem1 = int(r.info("memory")["used_memory"])
    a.lean_records(False)
    return {"memory_lean_bytes_per_job": (mem1 - mem0) / n}


def measure_bulk(a: Any, n: int) -> dict[str, float]:
    """Time the library's bulk put of n jobs."""
    _flush(a.url)
    start = time.perf_counter()
    a.put_bulk(n)
    return {"bulk_jobs_per_s": _per_sec(n, time.perf_counter() - start)}


def _drain(a: Any, queues: list[str], limit: int | None = None,
           plain: bool = False) -> tuple[int, float]:
    step = a.pop_complete_plain if plain else a.pop_complete
    done = 0
    start = time.perf_counter()
    while (limit is None or done < limit) and step(queues):
        done += 1
    return done, time.perf_counter() - start


def measure_drain(a: Any, n: int, plain: bool = False) -> dict[str, float]:
    """Fill n jobs, then time pop + complete of all of them in this process.

    plain: the library's plain pop() then complete() (two calls a job), for a system whose
    default drain uses a combined call (django-qless's complete_and_reserve).
    """
    _flush(a.url)
    a.fill(n, ["bench"])
    r = _redis(a.url)
    r.config_resetstat()
    commands0, rcpu0, _ = _server_cost(r)
    cpu0 = _cpu()
    done, elapsed = _drain(a, ["bench"], plain=plain)
    cpu = _cpu() - cpu0
    commands1, rcpu1, _ = _server_cost(r)
    if done != n:
        raise RuntimeError(f"drain finished {done} jobs, expected {n}")
    prefix = "drain_plain" if plain else "drain"
    return {f"{prefix}_jobs_per_s": _per_sec(n, elapsed),
            f"{prefix}_client_cpu_us_per_job": cpu * 1e6 / n,
            f"{prefix}_redis_cpu_us_per_job": (rcpu1 - rcpu0) * 1e6 / n,
            f"{prefix}_redis_commands_per_job": (commands1 - commands0) / n}


class _Timestamps:
    """The directory where job bodies write their lines."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="bench-ts-")
        self.workdir = tempfile.mkdtemp(prefix="bench-worker-")  # worker cwd and log
        self.log_path = os.path.join(self.workdir, "worker.log")

    def count(self) -> int:
        total = 0
        for name in os.listdir(self.dir):
            try:
                total += os.stat(os.path.join(self.dir, name)).st_size // LINE
            except FileNotFoundError:
                pass
        return total

    def wait(self, n: int, timeout: float, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + timeout
        while self.count() < n:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"worker exited early with {proc.returncode}:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"only {self.count()} of {n} jobs done after {timeout}s:\n{self.log_tail()}"
                )
            time.sleep(0.005)

    def lines(self) -> list[tuple[float, float]]:
        out = []
        for name in os.listdir(self.dir):
            with open(os.path.join(self.dir, name)) as f:
                for line in f:
                    done, t0 = line.split()
                    out.append((float(done), float(t0)))
        return sorted(out)

    def clear(self) -> None:
        # Truncate, not unlink: the workers keep their O_APPEND descriptors open.
        for name in os.listdir(self.dir):
            os.truncate(os.path.join(self.dir, name), 0)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-15:])
        except OSError:
            return ""


def _start_worker(a: Any, processes: int, ts: _Timestamps, log: Any) -> subprocess.Popen[bytes]:
    # The adapter's own PYTHONPATH stays behind this folder's: a checkout measured by
    # `run.py --compare-tree` hands its package to the worker that way.
    path = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, BENCH_TS_DIR=ts.dir, BENCH_REDIS_URL=a.url, PYTHONPATH=path)
    env.setdefault("BENCH_BODY", "noop")
    env["BENCH_HUEY_BLOCKING"] = "1"  # workers use huey's default blocking dequeue
    return subprocess.Popen(
        a.worker_argv(processes, "bench"),
        env=env,
        cwd=ts.workdir,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,  # its own process group, so we can stop it and its children
    )


def _stop_worker(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # leftovers (children) of the group we created
    except ProcessLookupError:
        pass
    proc.wait()


@contextlib.contextmanager
def _running_worker(
    a: Any, processes: int
) -> Iterator[tuple[_Timestamps, subprocess.Popen[bytes]]]:
    """Start the library's worker; always stop it and remove its directories afterwards."""
    ts = _Timestamps()
    try:
        with open(ts.log_path, "wb") as log:
            proc = _start_worker(a, processes, ts, log)
            try:
                yield ts, proc
            finally:
                _stop_worker(proc)
    finally:
        ts.remove()


def redis_cpu(r: redis.Redis) -> float:
    """Return the CPU seconds (user + sys) of Redis's main thread, the one that runs commands.

    A primary's capacity is that one thread; the process total adds its background threads
    (jemalloc returning freed pages, lazy frees, fsync), which run on other cores and, after
    a large fill, for seconds (the scaling probe's 1M-job fill). Servers without the
    per-thread fields (before 6.2) give the process total.
    """
    cpu = r.info("cpu")
    if "used_cpu_user_main_thread" in cpu:
        return float(cpu["used_cpu_sys_main_thread"]) + float(cpu["used_cpu_user_main_thread"])
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def server_stats(r: redis.Redis) -> tuple[float, dict[str, dict[str, float]]]:
    """Return Redis's main-thread CPU seconds and {command: {calls, usec}} since RESETSTAT."""
    stats = r.info("commandstats")
    per = {k.removeprefix("cmdstat_"): {"calls": float(v["calls"]), "usec": float(v["usec"])}
           for k, v in stats.items()}
    return redis_cpu(r), per


def stats_delta(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]],
                ignored: frozenset[str] | set[str] = IGNORED_COMMANDS,
                ) -> dict[str, dict[str, float]]:
    """Return after - before per command (commands not counted: INFO, CONFIG, ...)."""
    out = {}
    for name, v in after.items():
        if name.split("|")[0] in ignored:
            continue
        b = before.get(name, {"calls": 0.0, "usec": 0.0})
        calls, usec = v["calls"] - b["calls"], v["usec"] - b["usec"]
        if calls > 0:
            out[name] = {"calls": calls, "usec": usec}
    return out


_MONITOR_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


def monitor(url: str, seconds: float, limit: int = 200_000) -> list[tuple[str, list[str]]]:
    """Run MONITOR for `seconds`; return (source, [command, args...]) per command seen.

    source is "lua" for a command a script or function ran, else "client". A raw socket
    with a timeout, so an idle server (no command at all) still ends the window on time.
    """
    if url.startswith("unix://"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(url.removeprefix("unix://").split("?")[0])
    else:
        host, _, port = url.removeprefix("redis://").split("/")[0].rpartition(":")
        sock = socket.create_connection((host or "127.0.0.1", int(port or 6379)))
    out: list[tuple[str, list[str]]] = []
    buf = b""
    try:
        sock.sendall(b"MONITOR\r\n")
        deadline = time.monotonic() + seconds
        while len(out) < limit:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\r\n")
            for raw in lines:
                line = raw.decode(errors="replace")
                if not line.startswith("+") or line == "+OK" or "]" not in line:
                    continue
                head, _, rest = line.partition("] ")
                args = [m.group(1) for m in _MONITOR_ARG.finditer(rest)]
                if args:
                    out.append(("lua" if " lua" in head else "client", args))
    finally:
        sock.close()
    return out


def monitor_summary(trace: list[tuple[str, list[str]]]) -> dict[str, int]:
    """Count a MONITOR trace by command (+ function name for FCALL / script sha for EVALSHA)."""
    counts: dict[str, int] = {}
    for source, args in trace:
        name = args[0].lower()
        if name in ("fcall", "fcall_ro", "evalsha") and len(args) > 1:
            name += " " + (args[1] if name != "evalsha" else args[1][:8])
            if len(args) > 3 and args[2] == "0":
                name += " " + args[3]  # the engine's own dispatch: FCALL qless 0 <command>
        elif name in ("client", "publish", "subscribe", "config") and len(args) > 1:
            name += " " + args[1].split(":")[0] + (":" + args[1].split(":")[1]
                                                   if ":" in args[1] else "")
        counts[f"{source}: {name}"] = counts.get(f"{source}: {name}", 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _server_cost(r: redis.Redis) -> tuple[int, float, dict[str, int]]:
    stats = r.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
    total = sum(v for k, v in calls.items() if k.split("|")[0] not in IGNORED_COMMANDS)
    return total, redis_cpu(r), calls


def measure_worker(a: Any, n: int, processes: int, timeout: float) -> dict[str, Any]:
    """Run n no-op jobs with the library's worker; throughput and Redis cost per job."""
    _flush(a.url)
    a.fill(n, ["bench"])
    r = _redis(a.url)
    r.config_resetstat()
    _, cpu0, _ = _server_cost(r)
    _, before = server_stats(r)
    launch = time.time()
    with _running_worker(a, processes) as (ts, proc):
        ts.wait(n, timeout, proc)
        commands, cpu1, calls = _server_cost(r)
        _, after = server_stats(r)
        done = [t for t, _ in ts.lines()]
    delta = stats_delta(before, after)
    first, last = done[0], done[n - 1]
    counted = ((v, k) for k, v in calls.items() if k.split("|")[0] not in IGNORED_COMMANDS)
    top = sorted(counted, reverse=True)[:8]
    return {
        "jobs_per_s": _per_sec(n - 1, last - first),
        "jobs_per_s_from_launch": _per_sec(n, last - launch),
        "redis_commands_per_job": commands / n,
        "redis_cpu_us_per_job": (cpu1 - cpu0) * 1e6 / n,
        "top_commands": {k: v for v, k in top},
        "commandstats_per_job": {k: {"calls": v["calls"] / n, "usec": v["usec"] / n}
                                 for k, v in sorted(delta.items(), key=lambda kv: -kv[1]["usec"])},
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[idx]


def _latency_samples(a: Any, ts: _Timestamps, proc: subprocess.Popen[bytes], samples: int,
                     timeout: float, warm: bool = True) -> list[float]:
    """Put `samples` jobs 50-150 ms apart (seeded); return put -> job body start in ms."""
    rng = random.Random(42)
    if warm:
        for i in range(3):  # warm-up: imports done, connections open
            a.put(i)
        ts.wait(3, timeout, proc)
    ts.clear()
    time.sleep(0.3)
    for i in range(samples):
        time.sleep(rng.uniform(0.05, 0.15))
        a.put(i, time.time())
    ts.wait(samples, timeout, proc)
    return [(done - t0) * 1000 for done, t0 in ts.lines()]


def measure_latency(a: Any, samples: int, timeout: float) -> dict[str, float]:
    """Put jobs 50-150 ms apart to an idle single-process worker; put -> job body start."""
    _flush(a.url)
    with _running_worker(a, 1) as (ts, proc):
        lat = _latency_samples(a, ts, proc, samples, timeout)
    return {
        "latency_p50_ms": statistics.median(lat),
        "latency_p99_ms": _percentile(lat, 0.99),
        "latency_max_ms": max(lat),
    }


def settle_connections(r: redis.Redis, proc: subprocess.Popen[bytes], timeout: float,
                       log_tail: Callable[[], str] = lambda: "") -> float:
    """Wait until the worker's connection count has not changed for 2 s (at least 3 s);
    return the seconds waited. `log_tail` says why if the worker exits meanwhile."""
    start = time.monotonic()
    last, since = -1, start
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited early with {proc.returncode}:\n{log_tail()}")
        n = int(r.info("clients")["connected_clients"])
        now = time.monotonic()
        if n != last:
            last, since = n, now
        elif now - since >= 2.0 and now - start >= 3.0:
            break
        time.sleep(0.25)
    return time.monotonic() - start


#: Seconds between the idle section's warm-up jobs and its windows: an idle worker's steady
#: state. django-qless's children waiting for the idle-leader token close their connections
#: once the lead has not changed for 10 s (`--idle-disconnect`); the peers settle at once.
IDLE_SETTLE = 12.0


def measure_idle(a: Any, children: list[int], seconds: float, monitor_seconds: float,
                 samples: int, timeout: float, settle: float = IDLE_SETTLE) -> dict[str, Any]:
    """What idle worker processes cost Redis, and put -> start latency with them waiting.

    Per child count: start the worker, wait for its connections to settle, run 3 warm-up jobs,
    wait `settle` seconds (IDLE_SETTLE), then over `seconds`: INFO commandstats and INFO cpu
    deltas (per command name). Then a MONITOR window of `monitor_seconds` names what the
    commands are (FCALL by engine command), then `samples` latency probes with every child
    idle.
    """
    out: dict[str, Any] = {}
    # The floor: the same window on this Redis with no worker (its own cron, our INFO calls).
    _flush(a.url)
    r = _redis(a.url)
    cpu0, _ = server_stats(r)
    time.sleep(seconds)
    cpu1, _ = server_stats(r)
    baseline = (cpu1 - cpu0) * 1e6 / seconds
    for n in children:
        _flush(a.url)
        r = _redis(a.url)
        with _running_worker(a, n) as (ts, proc):
            settled = settle_connections(r, proc, timeout, ts.log_tail)
            for i in range(3):
                a.put(i)
            ts.wait(3, timeout, proc)
            time.sleep(settle)
            r.config_resetstat()
            cpu0, before = server_stats(r)
            time.sleep(seconds)
            cpu1, after = server_stats(r)
            # The harness sends only INFO and CONFIG here; a worker's PINGs are idle cost.
            delta = stats_delta(before, after, {"info", "config", "flushall"})
            trace = monitor(a.url, monitor_seconds) if monitor_seconds > 0 else []
            lat = _latency_samples(a, ts, proc, samples, timeout, warm=False)
        calls = sum(v["calls"] for v in delta.values())
        out[str(n)] = {
            "settle_s": settled,
            "commands_per_s": calls / seconds,
            "cpu_us_per_s": (cpu1 - cpu0) * 1e6 / seconds,
            "baseline_cpu_us_per_s": baseline,
            "cpu_over_baseline_us_per_s": (cpu1 - cpu0) * 1e6 / seconds - baseline,
            "commandstats_usec_per_s": sum(v["usec"] for v in delta.values()) / seconds,
            "per_command_per_s": {
                k: {"calls": v["calls"] / seconds, "usec": v["usec"] / seconds}
                for k, v in sorted(delta.items(), key=lambda kv: -kv[1]["calls"])},
            "monitor_seconds": monitor_seconds,
            "monitor_per_s": {k: c / monitor_seconds for k, c in
                              monitor_summary(trace).items()} if monitor_seconds > 0 else {},
            "latency_p50_ms": statistics.median(lat),
            "latency_p99_ms": _percentile(lat, 0.99),
            "latency_max_ms": max(lat),
        }
    return out


PROBE_BATCHES = 5


def _probe(a: Any, queues: list[str], waiting: int, probe: int) -> dict[str, float]:
    """With `waiting` jobs queued, time `probe` puts then `probe` pop+completes.

    Each is timed in PROBE_BATCHES batches and the median batch is kept, so a burst of load
    from other processes on a shared machine moves the number less.
    """
    _flush(a.url)
    a.fill(waiting, queues)
    r = _redis(a.url)
    size = max(1, probe // PROBE_BATCHES)
    put_us, pop_us = [], []
    i = 0
    cpu0, _ = server_stats(r)
    for _ in range(PROBE_BATCHES):
        start = time.perf_counter()
        for _ in range(size):
            a.put(i, 0.0, queues[i % len(queues)])
            i += 1
        put_us.append((time.perf_counter() - start) * 1e6 / size)
    cpu1, _ = server_stats(r)
    for _ in range(PROBE_BATCHES):
        done, elapsed = _drain(a, queues, size)
        if done != size:
            raise RuntimeError(f"scale probe popped {done} of {size}")
        pop_us.append(elapsed * 1e6 / size)
    cpu2, _ = server_stats(r)
    total = size * PROBE_BATCHES
    return {"put_us": statistics.median(put_us), "pop_us": statistics.median(pop_us),
            "put_redis_us": (cpu1 - cpu0) * 1e6 / total,
            "pop_redis_us": (cpu2 - cpu1) * 1e6 / total,
            "put_us_batches": put_us, "pop_us_batches": pop_us}


def _mean_probe(first: dict[str, Any], again: dict[str, Any]) -> dict[str, Any]:
    """Return the mean of two probes of one case (both kept under `runs`)."""
    out: dict[str, Any] = {k: (first[k] + again[k]) / 2 for k in
                           ("put_us", "pop_us", "put_redis_us", "pop_redis_us")}
    out["runs"] = [first, again]
    return out


def measure_scale(a: Any, sizes: list[int], probe: int, many_queues: int) -> dict[str, Any]:
    """Put and pop cost at several queue depths, and with jobs spread over many queues.

    The smallest case is probed first and again last, and the two are averaged: the other
    cases take minutes (a 1M-job fill), over which a shared machine's speed can drift by more
    than the depth changes the cost; the mean of before and after cancels a steady drift.
    """
    out: dict[str, Any] = {}
    multi = getattr(a, "multi_queue", True)
    first = _probe(a, ["bench"], sizes[0], probe)
    for size in sizes[1:]:
        out[f"depth_{size}"] = _probe(a, ["bench"], size, probe)
    if multi:
        names = [f"bench{i:02d}" for i in range(many_queues)]
        out[f"queues_{many_queues}"] = _probe(a, names, sizes[0], probe)
    out[f"depth_{sizes[0]}"] = _mean_probe(first, _probe(a, ["bench"], sizes[0], probe))
    if multi:
        out["queues_1"] = out[f"depth_{sizes[0]}"]
    _flush(a.url)
    return out


def main(factory: Callable[[str], Any]) -> None:
    """Parse the command line, run the requested metrics and print JSON."""
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--metrics", default="enqueue,drain,worker,latency")
    p.add_argument("--enqueue-n", type=int, default=20_000)
    p.add_argument("--drain-n", type=int, default=20_000)
    p.add_argument("--worker-n", type=int, default=5_000)
    p.add_argument("--latency-n", type=int, default=200)
    p.add_argument("--scale-sizes", default="10000,200000")
    p.add_argument("--scale-probe", type=int, default=2000)
    p.add_argument("--scale-queues", type=int, default=50)
    p.add_argument("--timeout", type=float, default=180.0)
    p.add_argument("--body", choices=("noop", "incr"), default="noop",
                   help="worker job body: record only, or record + one INCR")
    p.add_argument("--worker-procs", default="1,2", help="worker process counts to run")
    p.add_argument("--idle-children", default="1,10")
    p.add_argument("--idle-seconds", type=float, default=20.0)
    p.add_argument("--idle-monitor", type=float, default=5.0)
    p.add_argument("--idle-samples", type=int, default=100)
    args = p.parse_args()
    os.environ["BENCH_BODY"] = args.body  # inherited by the worker processes
    a = factory(args.url)
    result: dict[str, Any] = {"system": a.name, "notes": dict(a.notes)}
    for metric in args.metrics.split(","):
        if metric == "enqueue":
            result.update(measure_enqueue(a, args.enqueue_n))
            result.update(measure_lean_memory(a, args.enqueue_n))
        elif metric == "bulk":
            result.update(measure_bulk(a, args.enqueue_n))
        elif metric == "drain":
            result.update(measure_drain(a, args.drain_n))
        elif metric == "drain_plain":
            result.update(measure_drain(a, args.drain_n, plain=True))
        elif metric == "idle":
            children = [int(c) for c in args.idle_children.split(",")]
            result["idle"] = measure_idle(a, children, args.idle_seconds, args.idle_monitor,
                                          args.idle_samples, args.timeout)
        elif metric == "worker":
            for procs in (int(p) for p in args.worker_procs.split(",")):
                result[f"worker_{procs}"] = measure_worker(a, args.worker_n, procs, args.timeout)
        elif metric == "latency":
            result.update(measure_latency(a, args.latency_n, args.timeout))
        elif metric == "scale":
            sizes = [int(s) for s in args.scale_sizes.split(",")]
            result["scale"] = measure_scale(a, sizes, args.scale_probe, args.scale_queues)
        else:
            raise SystemExit(f"unknown metric {metric}")
    result["notes"].update(getattr(a, "notes", {}))
    print(json.dumps(result))
    sys.stdout.flush()
