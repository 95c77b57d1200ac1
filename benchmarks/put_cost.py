"""What one single put costs: Redis commands and instructions, and client CPU.

Usage: `.venv/bin/python benchmarks/put_cost.py [--puts 20000] [--callgrind 1000
[--callgrind-variant put|noop|write] [--handoff IDLE]] [--floor ROUNDS [--variants huey,put,...]
[--baseline DIR]] [--redis-server PATH]`. See benchmarks/README.md, "Single put (session 7)",
"Enqueue floor (session 8)" and "Enqueue (session 9)".

1. Commands per put: INFO commandstats deltas over 1,000 `Queue.put` calls of new jobs into
   one queue (after a warm-up), by command, and a MONITOR trace of one put.
2. Client CPU per put: time.process_time over `--puts` puts (the benchmark's put: a class
   name and a two-field dict, a fresh jid each).
3. With --callgrind N: redis-server under callgrind (at `hz 1`) for N puts; instructions per
   put by function family (the same families as benchmarks/attribution.py). With
   --handoff IDLE, every put hands its job to one of IDLE idle workers (handoff_cycle) and
   only the puts' FCALLs are counted ("Put → start latency (session 9)", "Hand-off put").
4. With --floor ROUNDS (Redis 7+): the enqueue floor. Our client's `Queue.put` timed as
   run.py times the enqueue (adapters/_common.measure_enqueue, `--puts` puts a round), its
   FCALL sent to a function library this script loads (never shipped) in place of the
   engine: `noop` replies the jid at once, `write` runs only the job's HSET and the work
   set's ZADD; then the real put and huey's enqueue (its venv, benchmarks/.venvs/huey). One
   process per variant, the four taking turns in each round (order rotated); medians over
   the rounds. Shows how much of a put is the round trip and the client. `--variants`
   picks some of them (huey first) and `base`: the real put of another checkout
   (`--baseline DIR`, e.g. `git archive main | tar -x -C DIR`), an A/B of two versions.

Load-robust: the command counts and callgrind instruction counts; client CPU moves a little
with the machine's load (process time, not wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import redis  # noqa: E402
from attribution import families, lua_range  # noqa: E402
from callgrind_redis import CallgrindError, callgrind_redis  # noqa: E402

from django_qless.core import Client  # noqa: E402
from django_qless.core.engine.lua import script_text  # noqa: E402
from testservers.redis_server import RedisServer, find_redis_server  # noqa: E402

KLASS = "bench.noop"

# The floor's stand-ins for the engine (argv: command, now, worker, queue, jid, klass, data,
# delay, as Queue.put sends them). `write` stores the record the real put stores (non-lean).
FLOOR_LIBRARY = """#!lua name=djqless_floor
redis.register_function('djqless_floor_noop', function(keys, argv) return argv[5] end)
redis.register_function('djqless_floor_write', function(keys, argv)
  local queue, jid = argv[4], argv[5]
  redis.call('HSET', 'ql:j:' .. jid, 'jid', jid, 'klass', argv[6], 'data', argv[7],
    'priority', '0', 'tags', '{}', 'state', 'waiting', 'queue', queue, 'retries', '5',
    'remaining', '5', 'time', argv[2])
  redis.call('ZADD', 'ql:q:' .. queue .. '-work', 0 - argv[2] / 10000000000, jid)
  return jid
end)
"""
FLOOR_VARIANTS = ("huey", "noop", "write", "put")
ALL_VARIANTS = (*FLOOR_VARIANTS, "base")


def puts(client: Client, n: int, queue: str = "bench") -> None:
    """Put `n` new jobs into `queue`, one engine call each (the benchmark's enqueue)."""
    q = client.queues[queue]
    for i in range(n):
        q.put(KLASS, {"i": i, "t0": 0.0})


def commands(url: str, n: int = 1000) -> dict[str, Any]:
    """Count the commands per put (commandstats) and trace one put (MONITOR)."""
    r = redis.Redis.from_url(url, decode_responses=True)
    r.flushall()
    client = Client(url)
    puts(client, 50)
    r.config_resetstat()
    puts(client, n)
    stats = r.info("commandstats")
    per: dict[str, float] = {}
    for name, row in stats.items():
        cmd = name.removeprefix("cmdstat_")
        if cmd.startswith(("config", "info")):
            continue
        per[cmd] = row["calls"] / n
    calls = per.pop("fcall", 0) + per.pop("evalsha", 0)
    trace: list[str] = []
    with r.monitor() as m:
        puts(client, 1)
        r.echo("put_cost: end of the put")  # (the put's last command, whichever it is)
        for event in m.listen():
            command = str(event["command"])
            if command.startswith(("FCALL", "EVALSHA")):
                continue
            if command.startswith("ECHO"):
                break
            if not command.startswith(("HELLO", "CLIENT")):  # (the ECHO's connection)
                trace.append(command)
    client.close()
    return {"engine_calls": calls, "lua_commands": sum(per.values()), "by_command": per,
            "trace": trace}


def client_cpu(url: str, n: int) -> tuple[float, float]:
    """Client CPU seconds per put over `n` puts (after a warm-up): user, system (the
    socket's send and receive)."""
    redis.Redis.from_url(url).flushall()
    client = Client(url)
    puts(client, 200)
    t0 = os.times()
    puts(client, n)
    t1 = os.times()
    client.close()
    return (t1.user - t0.user) / n, (t1.system - t0.system) / n


def client_instructions(url: str, n: int) -> float | None:
    """User-space instructions of the client per put (load-robust): this script under
    callgrind putting `n` jobs, minus the same run putting none."""
    valgrind = shutil.which("valgrind")
    if not valgrind:
        return None
    totals = []
    for count in (0, n):
        with tempfile.TemporaryDirectory(prefix="bench-putcl-") as tmp:
            subprocess.run(
                [valgrind, "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out",
                 sys.executable, __file__, "--client-run", str(count), "--url", url],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            text = Path(tmp, "cg.out").read_text()
        found = re.search(r"^totals:\s*(\d+)", text, re.M)
        if not found:
            return None
        totals.append(int(found.group(1)))
    return (totals[1] - totals[0]) / n


def handoff_cycle(url: str, client: Client, n: int, idle: int, queue: str = "bench") -> int:
    """Put `n` jobs one at a time (FCALL), each handed to one of `idle` idle workers
    (registered by `reserve.wait`, as a waiting worker does, each listening on its hand-off
    channel); between puts the worker completes its job and registers again, so the keys
    stay as a worker pool keeps them. Those calls go by EVALSHA of the engine's script, so
    a callgrind collecting only inside FCALL counts the puts alone. Returns the puts handed
    off."""
    r = redis.Redis.from_url(url, decode_responses=True)
    engine = r.register_script(script_text())
    sub = r.pubsub()
    names = [f"hand-{i}" for i in range(idle)]
    sub.subscribe(*[f"ql:hand:{name}" for name in names])

    def call(*argv: str) -> None:
        engine(args=[argv[0], repr(time.time()), *argv[1:]])

    for name in names:  # (a ttl shorter than a lease plus grace, as the worker's: no timers)
        call("reserve.wait", name, "6", "1", queue)
    q = client.queues[queue]
    handed = 0
    for i in range(n):
        jid = q.put(KLASS, {"i": i, "t0": 0.0})
        worker = r.hget(f"ql:j:{jid}", "worker")
        if worker:
            handed += 1
            call("complete", jid, worker, queue, "{}")
            call("reserve.wait", worker, "6", "1", queue)
    sub.close()
    return handed


def callgrind(binary: str, n: int, variant: str = "put", handoff: int = 0
              ) -> dict[str, Any]:
    """Run redis-server under callgrind for `n` puts; instructions per put by family.
    `variant` noop or write: the puts go to the floor's function of that name instead.
    `handoff` > 0: that many idle workers, and each put hands its job to one of them
    (handoff_cycle; callgrind then collects inside FCALL only: the puts)."""
    try:
        # (hand-offs: only FCALLs counted, the puts; the harness's other calls are EVALSHAs)
        tool = ("--toggle-collect=fcallCommand",) if handoff else ()
        with callgrind_redis(binary, "bench-putcg-", tool=tool) as cg:
            time.sleep(0.5)
            # (serverCron's share follows the wall time, which valgrind and the machine's
            # load stretch: at hz 1 it is ~10x smaller than at the default 10)
            redis.Redis.from_url(cg.url).config_set("hz", 1)
            client = Client(cg.url)
            if variant != "put":
                redis.Redis.from_url(cg.url).function_load(FLOOR_LIBRARY, replace=True)
                client.channel.invoker._fn = f"djqless_floor_{variant}"
            if handoff:
                handoff_cycle(cg.url, client, 20, handoff)  # warm-up (not counted)
                cg.counting(True)
                handed = handoff_cycle(cg.url, client, n, handoff)
                cg.counting(False)
                if handed != n:
                    return {"error": f"{handed} of {n} puts handed off"}
            else:
                puts(client, 50)  # warm-up: engine loaded, code paths touched (not counted)
                cg.counting(True)
                puts(client, n)
                cg.counting(False)
            client.close()
            cg.stop()
            text = cg.annotate()
    except CallgrindError as exc:
        return {"error": str(exc)}
    return {"puts": n, **families(text, n, lua_range(binary))}


# One process per floor variant, under its system's Python: times `n` puts per line read
# (adapters/_common.measure_enqueue, as run.py times the enqueue) and prints the result.
FLOOR_WORKER = """
import json, sys
sys.path.insert(0, sys.argv[3])
from _common import measure_enqueue
variant, url = sys.argv[1], sys.argv[2]
if variant == "base":  # (another checkout's code, ahead of the installed one)
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
    sys.path.insert(0, sys.argv[4])
if variant == "huey":
    from huey_ import Huey
    a = Huey(url)
else:
    from django_qless_ import DjangoQless
    a = DjangoQless(url)
    if variant not in ("put", "base"):  # (the floor's function instead of the engine)
        a.client.channel.invoker._fn = "djqless_floor_" + variant
import redis
r = redis.Redis.from_url(url)
def cpu():
    info = r.info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]
for line in sys.stdin:
    n = int(line)
    r.flushall()  # (the last round's jobs: not in this round's Redis CPU)
    cpu0 = cpu()
    result = measure_enqueue(a, n)
    result["redis_cpu_us_per_job"] = (cpu() - cpu0) * 1e6 / n
    print(json.dumps(result), flush=True)
"""


def floor(url: str, rounds: int, n: int, variants: tuple[str, ...] = FLOOR_VARIANTS,
          baseline: str = "") -> dict[str, list[dict[str, float]]]:
    """Time the enqueue variants in `rounds` rounds of `n` puts each; one process per
    variant for the whole run, the variants' order rotated from round to round, so that a
    change of the machine's load falls on all of them alike. `base` is the real put of the
    checkout at `baseline` (its own engine version: both load side by side)."""
    from peers import SYSTEMS, ensure_venv

    huey = SYSTEMS["huey"]
    ensure_venv(huey)
    redis.Redis.from_url(url).function_load(FLOOR_LIBRARY, replace=True)
    procs = {
        v: subprocess.Popen(
            [huey.python if v == "huey" else sys.executable, "-c", FLOOR_WORKER, v, url,
             str(HERE / "adapters"), baseline],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for v in variants
    }

    def run(variant: str, count: int) -> dict[str, float]:
        proc = procs[variant]
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(f"{count}\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"floor: the {variant} process ended")
        result: dict[str, float] = json.loads(line)
        return result

    out: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    try:
        for v in variants:
            run(v, 200)  # warm-up: imports done, engine loaded, connection made
        for i in range(rounds):
            k = i % len(variants)
            for v in variants[k:] + variants[:k]:
                out[v].append(run(v, n))
    finally:
        for proc in procs.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=30)
    return out


def print_floor(out: dict[str, list[dict[str, float]]]) -> None:
    """Print each variant's median jobs/s and the median of its per-round ratios to huey's;
    then its CPU per put, client and Redis (INFO cpu, with the round's other calls), and the
    rate those allow when client and server take turns on an idle machine (1 / their sum:
    less moved by other processes than the jobs/s, though it leaves out the wake-ups)."""
    huey = [r["enqueue_jobs_per_s"] for r in out["huey"]]
    huey_cpu = statistics.median(
        r["enqueue_client_cpu_us_per_job"] + r["redis_cpu_us_per_job"] for r in out["huey"])
    for variant, runs in out.items():
        rates = [r["enqueue_jobs_per_s"] for r in runs]
        client = statistics.median(r["enqueue_client_cpu_us_per_job"] for r in runs)
        server = statistics.median(r["redis_cpu_us_per_job"] for r in runs)
        both = statistics.median(
            r["enqueue_client_cpu_us_per_job"] + r["redis_cpu_us_per_job"] for r in runs)
        ratios = [a / b for a, b in zip(rates, huey, strict=True)]
        print(f"  {variant:<6} {statistics.median(rates):>8,.0f} jobs/s (median; "
              f"{min(rates):,.0f}-{max(rates):,.0f})   vs huey {statistics.median(ratios):.2f}x "
              f"(median of rounds; {min(ratios):.2f}-{max(ratios):.2f})")
        print(f"         CPU us/put: client {client:.1f} + Redis {server:.1f} = {both:.1f} "
              f"-> {1e6 / both:,.0f} jobs/s taking turns ({huey_cpu / both:.2f}x huey's)")


def main(argv: list[str] | None = None) -> int:
    """Measure and print the cost of one put."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--puts", type=int, default=20000, help="puts timed for client CPU")
    p.add_argument("--callgrind", type=int, default=0, metavar="N",
                   help="also count redis-server instructions over N puts")
    p.add_argument("--redis-server", default=None, help="redis-server binary")
    p.add_argument("--client-callgrind", type=int, default=0, metavar="N",
                   help="also count the client's instructions per put over N puts")
    p.add_argument("--callgrind-variant", default="put", choices=("put", "noop", "write"),
                   help="with --callgrind: count the floor's noop or write function instead")
    p.add_argument("--handoff", type=int, default=0, metavar="IDLE",
                   help="with --callgrind: IDLE idle workers registered, every put hands "
                   "its job to one of them")
    p.add_argument("--floor", type=int, default=0, metavar="ROUNDS",
                   help="time the enqueue floor (noop, write, put, huey), ROUNDS interleaved")
    p.add_argument("--variants", default=",".join(FLOOR_VARIANTS),
                   help="with --floor: the variants to time, of " + ",".join(ALL_VARIANTS)
                   + " (huey first: the ratios are to it)")
    p.add_argument("--baseline", default="", metavar="DIR",
                   help="with --floor: the checkout whose put the variant `base` times "
                   "(e.g. `git archive main | tar -x -C DIR`)")
    p.add_argument("--client-run", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--url", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.client_run is not None:  # (the run client_instructions profiles)
        client = Client(args.url)
        puts(client, 50)
        puts(client, args.client_run)
        client.close()
        return 0
    binary = args.redis_server or find_redis_server()
    if args.floor:
        with RedisServer(binary) as s:
            variants = tuple(args.variants.split(","))
            if variants[0] != "huey" or not set(variants) <= set(ALL_VARIANTS):
                p.error(f"--variants: huey first, then some of {','.join(ALL_VARIANTS)}")
            if "base" in variants and not args.baseline:
                p.error("--variants base needs --baseline DIR")
            print(f"enqueue floor, {args.floor} rounds of {args.puts} puts each:")
            print_floor(floor(s.url, args.floor, args.puts, variants, args.baseline))
        return 0
    with RedisServer(binary) as s:
        cmds = commands(s.url)
        cpu = client_cpu(s.url, args.puts)
        client_ir = client_instructions(s.url, args.client_callgrind) \
            if args.client_callgrind else None
    print(f"commands per put: {cmds['lua_commands']:.2f} (engine calls {cmds['engine_calls']:.2f})")
    for name, count in sorted(cmds["by_command"].items(), key=lambda x: -x[1]):
        print(f"  {name:<16} {count:.2f}")
    print("one put, as MONITOR shows it:")
    for line in cmds["trace"]:
        print(f"  {line[:120]}")
    print(f"client CPU per put: {(cpu[0] + cpu[1]) * 1e6:.1f} us (user {cpu[0] * 1e6:.1f}, "
          f"system {cpu[1] * 1e6:.1f}; {args.puts} puts)")
    if client_ir is not None:
        print(f"client instructions per put: {client_ir:,.0f} ({args.client_callgrind} puts, "
              "user space, callgrind)")
    if args.callgrind:
        cg = callgrind(binary, args.callgrind, args.callgrind_variant, args.handoff)
        if "error" in cg:
            print(f"callgrind: {cg['error']}")
        else:
            print(f"redis-server instructions per put: {cg['total_ir_per_job']:,.0f} "
                  f"({cg['puts']} puts, {args.callgrind_variant}"
                  f"{f', handed off, {args.handoff} idle' if args.handoff else ''})")
            for name, ir in cg["families_ir_per_job"].items():
                print(f"  {name:<62} {ir:>10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
