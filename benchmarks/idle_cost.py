"""What an idle worker costs Redis, counted in instructions instead of read off `INFO cpu`.

`INFO cpu` cannot resolve 20 µs/s: an idle Redis on a shared VM itself spends ~1,650 µs/s,
and two windows with no client at all differ by hundreds. So Redis runs under callgrind,
which counts the instructions it executes (the machine's load does not change the count):

1. a no-worker window of S seconds (the server's own cron, our one idle connection);
2. per child count N: start the library's worker with N children, wait until its
   connections settle, run 3 jobs, wait 12 s (its steady state: `_common.IDLE_SETTLE`),
   then count an S-second window;
3. a second no-worker window at the end (its difference from the first is the resolution).

The worker's cost is the event loop's instructions (aeMain, inclusive) above the no-worker
window's, less jemalloc's memory statistics (serverCron's fixed work, whose count moves by
±20k Ir/s with the allocator's state whatever the clients), per second of wall time.
Background threads (jemalloc purging what an earlier run freed) are shown, not judged.

The price of those instructions is measured on this machine just before: 4,000 idle
connections (half subscribed, as an idle child's pair) held to a native redis-server
(`INFO cpu` with them minus without, in alternating windows) and to the one under
callgrind (instructions with them minus without). Their quotient prices the work idle
connections cause, cold caches included, which is what an idle worker causes. Each command
a client sent (FCALL, PING, SUBSCRIBE...: not those its scripts ran, whose instructions are
counted already) adds a native PING's CPU time: the round trip, kernel included, which
callgrind does not see (its user-space part it does: a bound from above). The instruction
counts are exact; the µs carry the calibration's spread (reported). The cost is shown in all
and per idle child (all / children). Each window's instructions are split by where they go
(serverCron, clientsCron and its per-client parts, commands).

Usage: `.venv/bin/python benchmarks/idle_cost.py [--children 1,10,100] [--seconds 30]
[--repeats 2]`; `run.py` runs it at the end of its idle section (`--skip-idle-callgrind`
skips it; ~4 min, ~1.5 min with `--quick`). The worker runs the library next to this file:
run it from a `git archive` of another revision to measure that one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "adapters"))

import redis  # noqa: E402
from _common import IDLE_SETTLE  # noqa: E402
from callgrind_redis import CallgrindRedis, callgrind_redis, total_instructions  # noqa: E402

from django_qless.core.registry import register  # noqa: E402
from testservers.redis_server import RedisServer, find_redis_server  # noqa: E402

__all__ = ["PARTS", "calibrate", "client_only_commands", "core_worker", "count_commands",
           "measure", "split_functions"]

QUEUE = "idle-cost"
KLASS = "bench.idle_noop"
# Where an idle window's instructions go: (label, functions whose inclusive counts add up).
# clientsCron's parts are what each connected client costs every second.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("serverCron", ("serverCron",)),
    ("  memory stats (jemalloc)", ("cronUpdateMemoryStats",)),
    ("  clientsCron", ("clientsCron",)),
    ("    client memory usage", ("updateClientMemoryUsage",)),
    ("    track expansive clients", ("clientsCronTrackExpansiveClients",)),
    ("    resize query buffer", ("clientsCronResizeQueryBuffer",)),
    ("    resize output buffer", ("clientsCronResizeOutputBuffer",)),
    ("    timeout check", ("clientsCronHandleTimeout",)),
    ("  databasesCron", ("databasesCron",)),
    ("commands (call)", ("call",)),
    ("reading requests", ("readQueryFromClient",)),
    ("writing replies", ("handleClientsWithPendingWritesUsingThreads",)),
    ("beforeSleep", ("beforeSleep",)),
    ("event loop thread (aeMain)", ("aeMain",)),
    ("other threads", ()),
)
# Sent by clients only, though a script may call them: the engine never does (a test checks).
SENT_BY_CLIENTS = ("ping", "function", "script")
# Every engine call runs TIME once (api.lua; a test checks): TIME calls beyond the engine
# calls are the clients' clocks (`ServerClock`, core/engine/invoke.py) asking.
ENGINE_CALLS = ("fcall", "fcall_ro", "evalsha", "evalsha_ro")
LOOP = "event loop thread (aeMain)"
MEMSTATS = "  memory stats (jemalloc)"


@register(KLASS)
def idle_noop(job: Any) -> None:
    """Do nothing (the warm-up jobs)."""


def split_functions(annotate_text: str) -> dict[str, int]:
    """Return {function: instructions} from `callgrind_annotate --inclusive=yes` output."""
    out: dict[str, int] = {}
    for line in annotate_text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(?:\S+:)?(\S+?)(?:\s+\[.*\])?\s*$",
                     line)
        if m is None:
            m = re.match(r"\s*([\d,]+)\s+(?:\S+:)?(\S+?)(?:\s+\[.*\])?\s*$", line)
        if m is None:
            continue
        fn = m.group(2).split("'")[0]  # recursion levels (aeMain'2) count once: the max
        count = int(m.group(1).replace(",", ""))
        out[fn] = max(out.get(fn, 0), count)
    return out


def parts_of(functions: dict[str, int], total: int) -> dict[str, int]:
    """Return PARTS' instruction counts from a window's function table ("other threads":
    what the event loop did not run, e.g. jemalloc's background purging)."""
    out = {label: sum(functions.get(f, 0) for f in names) for label, names in PARTS}
    out["other threads"] = max(0, total - out[LOOP])
    return out


def _window(cg: CallgrindRedis, r: redis.Redis, seconds: float, label: str) -> dict[str, Any]:
    """Count `seconds` of the server's life; return its instructions, commands and parts."""
    r.config_resetstat()
    before = len(cg.outputs())
    cg.control("-z")  # nothing counted before this window (counting is off between them)
    cg.counting(True)
    start = time.monotonic()
    time.sleep(seconds)
    cg.counting(False)
    wall = time.monotonic() - start
    cg.control("-d", label)
    dump = _newest_dump(cg, before)
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                           str(dump)], capture_output=True, text=True, check=False).stdout
    calls, sent = count_commands(r.info("commandstats"), client_only_commands(r))
    ir = total_instructions(dump)
    keep = os.environ.get("IDLE_COST_KEEP")  # a directory: keep each window's annotation
    if keep:
        Path(keep, f"{label}.txt").write_text(text)
    dump.unlink()
    return {"seconds": wall, "instructions": ir, "commands": calls, "client_commands": sent,
            "parts": parts_of(split_functions(text), ir)}


def client_only_commands(r: redis.Redis) -> frozenset[str]:
    """Return the commands (and `container|sub` commands) this server refuses to scripts,
    plus PING: what only a client can have sent."""
    names = set(SENT_BY_CLIENTS)
    for name, info in r.command().items():
        if "noscript" in info["flags"]:
            names.add(name)
        for sub in info.get("subcommands") or ():
            flags = {_text(f) for f in sub[2]}
            if "noscript" in flags:
                names.add(_text(sub[0]))
    return frozenset(names)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def count_commands(stats: dict[str, Any], client_only: frozenset[str]) -> tuple[int, int]:
    """Return (all commands, commands clients sent) from `INFO commandstats`, leaving out
    the bench's own INFO and CONFIG.

    commandstats counts a command a script runs like one a client sends. Sent: what the
    server refuses to scripts (FCALL, EVALSHA, (S)SUBSCRIBE, HELLO...), PING, and the TIME
    calls beyond one per engine call; an idle worker sends nothing else (the bench's test
    checks the count against MONITOR).
    """
    calls = sent = engine = times = 0
    for key, value in stats.items():
        name = key.removeprefix("cmdstat_")
        n = int(value["calls"])
        if name.split("|")[0] in ("info", "config"):
            continue
        calls += n
        if name in client_only or name.split("|")[0] in client_only:
            sent += n
        engine += n if name in ENGINE_CALLS else 0
        times += n if name == "time" else 0
    return calls, sent + max(0, times - engine)


def _newest_dump(cg: CallgrindRedis, before: int) -> Path:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        files = [f for f in cg.outputs() if re.search(r"\.\d+$", f.name)]
        if len(files) > 0 and len(cg.outputs()) > before:
            return max(files, key=lambda f: int(f.name.rsplit(".", 1)[1]))
        time.sleep(0.2)
    raise RuntimeError("callgrind wrote no dump")


def _pings(r: redis.Redis, n: int) -> None:
    for _ in range(n):
        r.ping()


def _cpu_us(r: redis.Redis) -> float:
    cpu = r.info("cpu")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6


def _socket_path(url: str) -> str:
    return url.removeprefix("unix://").split("?")[0]


@contextmanager
def _idle_connections(r: redis.Redis, path: str, n: int) -> Iterator[None]:
    """Hold `n` idle connections to the server at `path` (every other one subscribed, as
    an idle child's pair is); close them all at the end and wait until the server has."""
    base = int(r.info("clients")["connected_clients"])
    socks = []
    try:
        for i in range(n):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            socks.append(sock)
            sock.connect(path)
            if i % 2:
                sock.sendall(b"SUBSCRIBE idle-cost:%d\r\n" % i)
        deadline = time.monotonic() + 120
        while int(r.info("clients")["connected_clients"]) < base + n:
            if time.monotonic() > deadline:
                raise RuntimeError("the calibration connections did not all arrive")
            time.sleep(0.2)
        time.sleep(1.0)
        yield
    finally:
        for sock in socks:
            sock.close()
        deadline = time.monotonic() + 120
        while int(r.info("clients")["connected_clients"]) > base and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)


def calibrate(binary: str, cg: CallgrindRedis, conns: int = 4000, seconds: float = 8.0,
              repeats: int = 2) -> dict[str, Any]:
    """Price an instruction of the work idle connections cause, on this machine.

    The same `conns` idle connections (half subscribed) are held to a native redis-server
    (`INFO cpu` with them minus without, alternating windows, `repeats` times) and to the
    one under callgrind (instructions with them minus without): their quotient is the price
    of one such instruction, cold caches included (each connection is visited once a
    second). A PING's native CPU time prices the commands.
    """
    with_us, without_us, ping_us = [], [], []
    with RedisServer(binary) as native:
        r = redis.Redis.from_url(native.url)
        path = _socket_path(native.url)
        for _ in range(3):
            _pings(r, 1000)
            c0 = _cpu_us(r)
            _pings(r, 10_000)
            ping_us.append((_cpu_us(r) - c0) / 10_000)
        for _ in range(repeats):
            c0 = _cpu_us(r)
            time.sleep(seconds)
            without_us.append((_cpu_us(r) - c0) / seconds)
            with _idle_connections(r, path, conns):
                c0 = _cpu_us(r)
                time.sleep(seconds)
                with_us.append((_cpu_us(r) - c0) / seconds)
        r.close()
    r = redis.Redis(unix_socket_path=cg.sock)
    without = _window(cg, r, seconds, "calibration-without")
    with _idle_connections(r, cg.sock, conns):
        loaded = _window(cg, r, seconds, "calibration-with")
    r.close()
    per_conn_ir = (loaded["instructions"] / loaded["seconds"]
                   - without["instructions"] / without["seconds"]) / conns
    per_conn_us = [(a - b) / conns for a, b in zip(with_us, without_us, strict=True)]
    price = statistics.median(per_conn_us) / per_conn_ir
    return {"connections": conns, "seconds": seconds,
            "native_us_per_s_with": with_us, "native_us_per_s_without": without_us,
            "us_per_connection_second": per_conn_us,
            "instructions_per_connection_second": per_conn_ir,
            "us_per_instruction": price,
            "us_per_instruction_spread": (max(per_conn_us) - min(per_conn_us)) / per_conn_ir,
            "ping_us": statistics.median(ping_us)}


@contextmanager
def core_worker(url: str, children: int, log_path: str,
                queue: str = QUEUE) -> Iterator[subprocess.Popen[bytes]]:
    """Run the core worker (importing this module's jobs) on `queue`; stop it on leaving."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # The library next to this file (a `git archive` of another revision measures that one).
    env["PYTHONPATH"] = os.pathsep.join((str(HERE), str(HERE.parent)))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "django_qless.core.workers", "--url", url,
             "-n", str(children), "--import", "idle_cost", queue],
            env=env, cwd=HERE, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass


def _settle(r: redis.Redis, proc: subprocess.Popen[bytes], want_more_than: int,
            timeout: float, log_path: str) -> int:
    """Wait until the connection count is above `want_more_than` and unchanged for 3 s."""
    start = time.monotonic()
    last, since = -1, start
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited ({proc.returncode}):\n"
                               f"{Path(log_path).read_text()[-2000:]}")
        n = int(r.info("clients")["connected_clients"])
        now = time.monotonic()
        if n != last:
            last, since = n, now
        elif n > want_more_than and now - since >= 3.0:
            return n
        time.sleep(0.3)
    raise RuntimeError(f"worker connections did not settle in {timeout:g}s")


def _warm_up(url: str, timeout: float) -> None:
    """Run 3 jobs through the worker, so the window sees it idle after work."""
    from django_qless.core.client import Client

    client = Client(url)
    jids = [client.queues[QUEUE].put(KLASS, {"i": i}) for i in range(3)]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [getattr(client.find_job(j), "state", None) for j in jids]
        if all(s == "complete" for s in states):
            break
        time.sleep(0.2)
    else:
        raise RuntimeError(f"warm-up jobs did not complete: {states}")
    client.close()


def measure(binary: str, children: list[int], seconds: float, *, repeats: int = 2,
            calibration_seconds: float = 8.0, timeout: float = 180.0,
            wait: float = IDLE_SETTLE) -> dict[str, Any]:
    """Run the whole measurement (see the module docstring); return its document.

    `wait`: seconds between the warm-up jobs and the window (past 60 s, the clients' clocks
    have asked for TIME once more).
    """
    out: dict[str, Any] = {"seconds": seconds, "children": {}, "wait": wait}
    with callgrind_redis(binary, "idle-cost-") as cg:
        out["calibration"] = calibrate(binary, cg, seconds=calibration_seconds,
                                       repeats=repeats)
        r = redis.Redis(unix_socket_path=cg.sock)
        base = int(r.info("clients")["connected_clients"])
        out["baseline"] = _window(cg, r, seconds, "baseline")
        log_path = os.path.join(tempfile.gettempdir(), f"idle-cost-{os.getpid()}.log")
        for n in children:
            r.flushall()
            with core_worker(cg.url, n, log_path) as proc:
                _settle(r, proc, base, timeout, log_path)
                _warm_up(cg.url, timeout)
                time.sleep(wait)
                connections = int(r.info("clients")["connected_clients"]) - base
                w = _window(cg, r, seconds, f"children-{n}")
                w["connections"] = connections
                out["children"][str(n)] = w
            deadline = time.monotonic() + timeout
            while int(r.info("clients")["connected_clients"]) > base:
                if time.monotonic() > deadline:
                    raise RuntimeError("the worker's connections did not close")
                time.sleep(0.3)
            time.sleep(3.0)  # what its connections freed is purged meanwhile, mostly
        out["baseline_end"] = _window(cg, r, seconds, "baseline-end")
        r.close()
    return summarize(out)


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    """Add per-second rates and µs to a measurement document (pure arithmetic).

    Judged: the event loop's instructions above the no-worker window, less jemalloc's
    memory statistics (serverCron's fixed work; its count moves by ±20k Ir/s with the
    allocator's state, whatever the clients), at the instruction's price, plus each
    command a client sent above the no-worker window at a PING's price (its kernel time:
    the round trip the instructions leave out). Commands run by scripts are in the
    instructions already and are not priced again. Also per child (total / children).
    """
    cal = doc["calibration"]
    price = cal["us_per_instruction"]
    b0, b1 = doc["baseline"], doc["baseline_end"]

    def judged_ir(w: dict[str, Any]) -> float:
        return float(w["parts"][LOOP] - w["parts"][MEMSTATS]) / float(w["seconds"])

    base_ir = judged_ir(b0)
    base_sent = b0.get("client_commands", b0["commands"]) / b0["seconds"]
    doc["baseline_instructions_per_s"] = b0["instructions"] / b0["seconds"]
    doc["baseline_judged_instructions_per_s"] = base_ir
    doc["resolution_us_per_s"] = abs(judged_ir(b1) - base_ir) * price
    for n, w in doc["children"].items():
        ir = judged_ir(w) - base_ir
        sent = w.get("client_commands", w["commands"]) / w["seconds"]
        w["judged_instructions_per_s"] = ir
        w["instructions_per_s"] = w["instructions"] / w["seconds"] - \
            doc["baseline_instructions_per_s"]
        w["commands_per_s"] = w["commands"] / w["seconds"]
        w["client_commands_per_s"] = sent
        w["us_per_s"] = ir * price + max(0.0, sent - base_sent) * cal["ping_us"]
        w["us_per_child_per_s"] = w["us_per_s"] / max(1, int(n))
        w["parts_per_s"] = {k: v / w["seconds"] - b0["parts"].get(k, 0) / b0["seconds"]
                            for k, v in w["parts"].items()}
    return doc


def format_idle_cost(doc: dict[str, Any]) -> str:
    """Return the report: one line per child count, then where the instructions go."""
    cal = doc["calibration"]
    price = cal["us_per_instruction"] * 1000
    lines = [
        f"IDLE WORKER COST BY INSTRUCTIONS (redis-server under callgrind; {doc['seconds']:g} s "
        f"windows above a no-worker window of {doc['baseline_judged_instructions_per_s']:,.0f} "
        f"Ir/s; judged: event loop less jemalloc stats, 1 Ir = {price:.3f} ns "
        f"(idle connections here: {cal['instructions_per_connection_second']:,.0f} Ir/s and "
        f"{statistics.median(cal['us_per_connection_second']):.3f} us/s each, spread "
        f"{cal['us_per_instruction_spread'] * 1000:.3f} ns), "
        f"+ commands clients sent at a PING's {cal['ping_us']:.1f} us (cmds/s: all "
        f"commandstats counts, scripts' included; sent/s: those clients sent); resolution: "
        f"two no-worker windows differ by {doc['resolution_us_per_s']:.2f} us/s)",
    ]
    head = (f"{'children':>8} {'conns':>6} {'cmds/s':>7} {'sent/s':>7} {'Ir/s':>9} "
            f"{'us/s':>7} {'us/s/child':>10} {'all Ir/s':>9}")
    lines += [head, "-" * len(head)]
    for n, w in doc["children"].items():
        sent = w.get("client_commands_per_s", w["commands_per_s"])
        per_child = w.get("us_per_child_per_s", w["us_per_s"] / max(1, int(n)))
        lines.append(f"{n:>8} {w['connections']:>6} {w['commands_per_s']:>7.2f} "
                     f"{sent:>7.2f} {w['judged_instructions_per_s']:>9,.0f} "
                     f"{w['us_per_s']:>7.2f} {per_child:>10.2f} "
                     f"{w['instructions_per_s']:>9,.0f}")
    lines.append("where the instructions go (Ir/s above the no-worker window, inclusive):")
    lines.append(f"  {'':32}" + "".join(f" {n + ' ch':>9}" for n in doc["children"]))
    for label, _ in PARTS:
        lines.append(f"  {label:32}" + "".join(
            f" {w['parts_per_s'].get(label, 0):>9,.0f}" for w in doc["children"].values()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure and print; `--json` also writes the document."""
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--children", default="1,10,100")
    p.add_argument("--seconds", type=float, default=30.0, help="each window (default 30)")
    p.add_argument("--repeats", type=int, default=2,
                   help="native calibration windows with and without (default 2)")
    p.add_argument("--redis-server", default=None)
    p.add_argument("--json", default=None, help="write the document here")
    p.add_argument("--wait", type=float, default=IDLE_SETTLE,
                   help=f"seconds idle after the warm-up jobs before each window (default "
                        f"{IDLE_SETTLE:g})")
    args = p.parse_args(argv)
    binary = args.redis_server or find_redis_server()
    doc = measure(binary, [int(c) for c in args.children.split(",")], args.seconds,
                  repeats=args.repeats, wait=args.wait)
    print(format_idle_cost(doc))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
