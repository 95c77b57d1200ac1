"""One Redis against a 3-primary cluster: the same jobs, the same client processes.

Usage: `make bench ARGS="--cluster --quick"` or `.venv/bin/python benchmarks/cluster.py
[--quick] [--jobs N] [--procs N] [--redis-server BIN] [--no-save]`. See benchmarks/README.md,
"One node against three shards".

Both setups get 6 queues and N client processes (process i serves queue i mod 6). On the
cluster (a `LocalCluster` of 3 primaries, no replicas, like the single node) the queues are
pinned two per primary through a `ShardedClient`. Each setup runs two timed phases, every
process starting together: **enqueue** (one `put` call per job into its queue) and
**drain** (`reserve`, then `complete_and_reserve` until the queue is empty: the worker's
hot path without a job body). Reported per phase: jobs/s over the wall time, Redis CPU per
job on each primary (`INFO cpu` deltas) and in total, client CPU per job.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # django_qless, when run as a script from anywhere

import redis  # noqa: E402

from django_qless.core.client import Client  # noqa: E402
from django_qless.core.cluster.sharded import ShardedClient  # noqa: E402
from testservers.cluster import LocalCluster  # noqa: E402
from testservers.redis_server import RedisServer, find_redis_server  # noqa: E402

RESULTS = HERE / "results"
QUEUES = [f"b{i}" for i in range(6)]
SHARDS = 8
PHASES = ("enqueue", "drain")
IDLE_SECONDS = 2.0


def redis_cpu(nodes: list[redis.Redis]) -> list[float]:
    """Return each node's own CPU seconds (user + sys) so far."""
    out = []
    for node in nodes:
        info = node.info("cpu")
        out.append(float(info["used_cpu_user"]) + float(info["used_cpu_sys"]))
    return out


def measure(target: dict[str, Any], nodes: list[redis.Redis], node_of: dict[str, int],
            procs: int, jobs: int) -> dict[str, Any]:
    """Run both phases with `procs` processes on `target` (queue q on node `node_of[q]`);
    return the numbers per phase."""
    ctx = mp.get_context("spawn")
    ready, done = ctx.Queue(), ctx.Queue()
    per_proc = jobs // procs
    gos = [ctx.Event() for _ in PHASES]
    workers = []
    result: dict[str, Any] = {}
    for proc in range(procs):
        # One event per phase: a process that finished a phase never sees the next one's
        # start early.
        p = ctx.Process(target=_child_phases, args=(target, proc, per_proc, ready, gos, done))
        p.start()
        workers.append(p)
    try:
        for index, phase in enumerate(PHASES):
            for _ in range(procs):
                ready.get(timeout=120)
            if index == 0:
                # What the nodes burn doing nothing (cron, cluster bus): subtracted below.
                idle0 = redis_cpu(nodes)
                time.sleep(IDLE_SECONDS)
                idle = [(b - a) / IDLE_SECONDS for a, b in zip(idle0, redis_cpu(nodes),
                                                               strict=True)]
                result["idle_cpu_share_by_node"] = [round(v, 4) for v in idle]
            cpu0 = redis_cpu(nodes)
            started = time.monotonic()
            gos[index].set()
            counts, client_cpu = 0, 0.0
            served = [0] * len(nodes)
            for _ in range(procs):
                name, count, cpu = done.get(timeout=600)
                counts += count
                client_cpu += cpu
                served[node_of[name]] += count
            seconds = time.monotonic() - started
            cpu = [after - before for before, after in zip(cpu0, redis_cpu(nodes), strict=True)]
            busy = [max(0.0, c - rate * seconds) for c, rate in zip(cpu, idle, strict=True)]
            result[phase] = {
                "jobs": counts, "seconds": round(seconds, 3),
                "jobs_per_s": round(counts / seconds, 1),
                "jobs_by_node": served,
                "redis_us_per_job": round(sum(cpu) * 1e6 / counts, 1),
                "redis_us_per_job_net": round(sum(busy) * 1e6 / counts, 1),
                # Each node's CPU, less its idle rate, over the jobs of its own queues.
                "redis_us_per_served_job_by_node": [
                    round(b * 1e6 / n, 1) if n else None for b, n in zip(busy, served,
                                                                          strict=True)],
                "redis_cpu_share_by_node": [round(c / seconds, 3) for c in cpu],
                "client_us_per_job": round(client_cpu * 1e6 / counts, 1),
            }
    finally:
        for p in workers:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return result


def _child_phases(target: dict[str, Any], proc: int, jobs: int, ready: Any, gos: list[Any],
                  done: Any) -> None:
    """`child` with one start event per phase."""
    name = QUEUES[proc % len(QUEUES)]
    if "url" in target:
        client = Client(target["url"])
    elif "url_of" in target:  # each queue on its own plain server, a shard keyspace each
        client = Client(target["url_of"][name], keyspace=target["keyspace_of"][name])
    else:
        client = ShardedClient(target["nodes"], shards=SHARDS,
                               placement=target["placement"]).for_queue(name)
    queue = client.queues[name]
    client.reserve([name], 1)  # connect and load the engine before the clock starts
    for index, phase in enumerate(PHASES):
        ready.put(proc)
        gos[index].wait()
        cpu0 = time.process_time()
        count = 0
        if phase == "enqueue":
            for i in range(jobs):
                queue.put("K", {"i": i})
            count = jobs
        else:
            found, _ = client.reserve([name], 1)
            while found:
                count += 1
                _, found, _ = client.complete_and_reserve(found[0], [name], 1)
        done.put((name, count, time.process_time() - cpu0))


def free_port() -> int:
    """Return a TCP port on loopback that is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pins(cluster: LocalCluster) -> dict[str, str]:
    """Pin the 6 queues two per primary, each on a shard that primary owns."""
    shards = ShardedClient([f"redis://127.0.0.1:{cluster.primaries()[0].port}"], shards=SHARDS)
    by_port: dict[int, list[str]] = {}
    for tag in shards.tags:
        by_port.setdefault(cluster.primary_for_key(f"ql:{{{tag}}}:").port, []).append(tag)
    shards.close()
    if len(by_port) != 3:
        raise RuntimeError(f"the shards do not cover 3 primaries: {by_port}")
    ports = sorted(by_port)
    return {q: by_port[ports[i % 3]][(i // 3) % len(by_port[ports[i % 3]])]
            for i, q in enumerate(QUEUES)}


def run(quick: bool, jobs: int | None, procs: int, binary: str) -> dict[str, Any]:
    """Measure one node, then the 3-primary cluster; return the whole document."""
    jobs = jobs or (6000 if quick else 30_000)
    doc: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(), "loadavg_start": list(os.getloadavg()),
        "jobs": jobs, "procs": procs, "queues": len(QUEUES), "binary": binary,
    }
    with RedisServer(binary, port=free_port()) as server:
        # TCP on loopback, as the cluster's nodes are reached (not the unix socket).
        url = f"redis://127.0.0.1:{server.port}/0"
        conn = redis.Redis.from_url(url)
        doc["redis_version"] = conn.info("server")["redis_version"]
        doc["one_node"] = measure({"url": url}, [conn], dict.fromkeys(QUEUES, 0), procs, jobs)
        print("one node   done", flush=True)
    with LocalCluster(binary, primaries=3, replicas=0) as cluster:
        placement = pins(cluster)
        primaries = sorted(cluster.primaries(), key=lambda n: n.port)
        target = {"nodes": [f"redis://127.0.0.1:{n.port}" for n in primaries],
                  "placement": placement}
        doc["placement"] = placement
        index = {n.port: i for i, n in enumerate(primaries)}
        node_of = {q: index[cluster.primary_for_key(f"ql:{{{placement[q]}}}:").port]
                   for q in QUEUES}
        doc["three_shards"] = measure(target, [n.conn() for n in primaries], node_of, procs,
                                      jobs)
        print("3 shards   done", flush=True)
    doc["loadavg_end"] = list(os.getloadavg())
    return doc


def render(doc: dict[str, Any]) -> str:
    """Return the text report of one run."""
    one, three = doc["one_node"], doc["three_shards"]
    lines = [
        f"date {doc['date']}  nproc {doc['nproc']}  redis {doc['redis_version']}  "
        f"load {doc['loadavg_start']} -> {doc['loadavg_end']}",
        f"{doc['jobs']} jobs, {doc['procs']} client processes over {doc['queues']} queues "
        "(cluster: 3 primaries, no replicas, 2 queues per primary)",
        "",
        f"{'':34} {'1 node':>10} {'3 shards':>10} {'3 ÷ 1':>7}",
    ]
    for phase in PHASES:
        a, b = one[phase], three[phase]
        rows = [
            ("jobs/s", a["jobs_per_s"], b["jobs_per_s"]),
            ("Redis CPU per job, all nodes (µs)", a["redis_us_per_job"], b["redis_us_per_job"]),
            ("  less the nodes' idle CPU (µs)", a["redis_us_per_job_net"],
             b["redis_us_per_job_net"]),
            ("client CPU per job (µs)", a["client_us_per_job"], b["client_us_per_job"]),
        ]
        lines.append(f"{phase}:")
        for label, x, y in rows:
            lines.append(f"  {label:32} {x:>10,.1f} {y:>10,.1f} {y / x:>6.2f}×")
        by_node = " / ".join(f"{v:.1f}" for v in b["redis_us_per_served_job_by_node"])
        share = " / ".join(f"{v:.0%}" for v in b["redis_cpu_share_by_node"])
        lines.append(f"  3 shards, each primary: {by_node} µs per job of its own queues "
                     f"(net of idle); busy {share} of a core "
                     f"(1 node: {a['redis_cpu_share_by_node'][0]:.0%})")
    idle = " / ".join(f"{v:.1%}" for v in three["idle_cpu_share_by_node"])
    lines.append(f"idle CPU of a node: 1 node {one['idle_cpu_share_by_node'][0]:.1%}, "
                 f"3 primaries {idle} of a core")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run, print and save."""
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="6,000 jobs (default 30,000)")
    p.add_argument("--jobs", type=int, default=None, help="jobs per phase")
    p.add_argument("--procs", type=int, default=6, help="client processes (default 6)")
    p.add_argument("--redis-server", default=None, help="redis-server binary (default: PATH)")
    p.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/")
    args = p.parse_args(argv)
    doc = run(args.quick, args.jobs, args.procs, args.redis_server or find_redis_server())
    text = render(doc)
    print("\n" + text)
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        name = "cluster-quick" if args.quick else "cluster"
        (RESULTS / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
        (RESULTS / f"{name}.txt").write_text(text + "\n")
        print(f"saved results/{name}.json and {name}.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
