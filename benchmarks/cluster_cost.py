"""Where a cluster primary's extra Redis cost per job goes: redis-server instructions counted.

`python benchmarks/cluster_cost.py [--redis-server BIN] [--jobs N] [--shards N] [--server-clock]`
runs the same job stream (N `put` calls, then `reserve` + `complete_and_reserve` until the
queue is empty: benchmarks/cluster.py's two phases, through the real `Client`) against
redis-server under callgrind in five setups:

- `default`: a single server, the default keyspace `ql:`;
- `shard`: the same server, one shard keyspace `ql:{<tag>}:` (numkeys 1, SPUBLISH, lean records);
- `alternate`: the same server, `--shards` shard keyspaces whose calls alternate (several
  shards on one primary: do the engine's per-keyspace memos survive the switches?);
- `cluster`: a cluster-enabled node owning all 16384 slots, the shard keyspace, the client
  in cluster mode (`RedisCluster`, the ClusterTransport);
- `cluster-alternate`: that node, `--shards` keyspaces alternating.

Reported per job and phase: the instructions in total, and split by where they run (the
cluster code, pub/sub, Lua, the unnamed functions of a stripped binary, the allocator, the
rest of redis-server), plus the commands the server ran per job (INFO commandstats) and the
functions whose count differs most between two setups. Instruction counts do not depend on
the machine's load; context switches and cache misses are not instructions, so what they
cost is not in these numbers.

By default each client sends its own time (the engine's caller-time variant), a clock that
advances 0.2 ms per call: the engine's once-a-second work (held statistics written out,
memos renewed) then happens as often per job in every setup, however slowly valgrind runs.
`--server-clock` uses the production engine and the server's clock instead.

`--wakeups` measures instead what instructions leave out, on real (not valgrind) servers with
benchmarks/cluster.py's processes and phases: per job, each node's user and system CPU
(`INFO cpu`) and its context switches (/proc/<pid>/status; a voluntary one is the server
going to sleep in its event loop with nothing to do, so it counts wake-ups), and the
commands it ran per wake-up, and the clients' CPU, for a single server with 6 and with 2
client processes, three plain servers with 2 each (one shard keyspace per queue), a one-node
cluster with 6, and 3 primaries with 6 (2 per primary, as in cluster.py). CPU seconds
depend on the machine's load; the wake-up counts much less.
See benchmarks/README.md, "Where a cluster primary's extra cost goes (session 8)".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # django_qless, when run as a script from anywhere

import cluster as bench  # noqa: E402  (benchmarks/cluster.py: its processes and phases)
import redis  # noqa: E402
from callgrind_redis import CallgrindError, CallgrindRedis, Clock, callgrind_redis  # noqa: E402
from redis.cluster import RedisCluster  # noqa: E402

from django_qless.core.client import Client  # noqa: E402
from django_qless.core.cluster.sharded import ShardedClient  # noqa: E402
from testservers.cluster import LocalCluster  # noqa: E402
from testservers.redis_server import RedisServer, find_redis_server  # noqa: E402

PHASES = ("put", "drain")
TAG = "s7"
# Where a function's instructions go, by its name (first match wins).
GROUPS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cluster", re.compile(r"cluster|getNodeBy|keyHashSlot|crc16|[Ss]lot|Redirect|clusterNode")),
    ("pubsub", re.compile(r"pubsub|[Pp]ublish|Shard[Cc]hannel")),
    ("lua", re.compile(r"^lua|^luaV|^luaH|^luaS|^luaD|^luaC|^luaF|^luaG|^luaK|^luaL|^luaM|"
                       r"^luaO|^luaT|^luaX|^luaY|^luaZ|^lua_|^index2adr|^str_(?!to_mpn)|^tbl_|^math_|"
                       r"^cjson|^json_|^strbuf|^fpconv|^luaRedis|^luaReply|^luaCall|"
                       r"^redisProtocolToLuaType|^luaPush|^auxgetstr|^lua|Lua")),
    ("unnamed", re.compile(r"^0x[0-9a-f]+$")),
    ("alloc", re.compile(r"^je_|^ztrymalloc|^zmalloc|^zfree|^zrealloc|^zcalloc|malloc|free$|"
                         r"^arena_|^tcache|^imalloc|^ifree|^sdsalloc|^extent")),
)


@contextmanager
def cluster_node(binary: str, port: int) -> Iterator[CallgrindRedis]:
    """A cluster-enabled redis-server under callgrind owning every slot, on TCP `port`."""
    with callgrind_redis(binary, "cluster-cost-", [
            "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf"]) as cg:
        node = redis.Redis(unix_socket_path=cg.sock, decode_responses=True)
        node.execute_command(  # type: ignore[no-untyped-call]
            "CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + 120
        while node.cluster("INFO")["cluster_state"] != "ok":
            if time.monotonic() > deadline:
                raise CallgrindError("the one-node cluster did not become ok")
            time.sleep(0.5)
        yield cg


def cluster_port() -> int:
    """Return a free loopback port whose cluster bus port (+10000) is a port too."""
    while True:
        port = bench.free_port()
        if port < 55535:
            return port


def commands(conn: redis.Redis) -> dict[str, int]:
    """Return the server's command counts so far (INFO commandstats)."""
    return {name.removeprefix("cmdstat_"): int(v["calls"])
            for name, v in conn.info("commandstats").items()}


def drive(clients: list[Client], jobs: int, phase: Callable[[str, Callable[[], None]], None]
          ) -> None:
    """Warm up each client, then run the two counted phases, calls alternating over the
    clients (one queue each)."""
    queues = [f"q{i}" for i in range(len(clients))]
    for client, name in zip(clients, queues, strict=True):  # engine loaded, memos made
        for _ in range(3):
            client.queues[name].put("K", {"i": 0})
        found, _ = client.reserve([name], 1)
        while found:
            _, found, _ = client.complete_and_reserve(found[0], [name], 1)

    def put() -> None:
        for i in range(jobs):
            k = i % len(clients)
            clients[k].queues[queues[k]].put("K", {"i": i})

    def drain() -> None:
        held = [client.reserve([name], 1)[0] for client, name in zip(clients, queues,
                                                                       strict=True)]
        while any(held):
            for k, client in enumerate(clients):
                if held[k]:
                    _, held[k], _ = client.complete_and_reserve(held[k][0], [queues[k]], 1)

    phase("put", put)
    phase("drain", drain)


def measure_on(cg: CallgrindRedis, setup: str, clients: list[Client], jobs: int,
               out: dict[str, dict[str, Any]]) -> None:
    """Count the two phases of `setup` on server `cg` (dumped as '<setup>:<phase>')."""
    conn = redis.Redis(unix_socket_path=cg.sock)

    def phase(name: str, fn: Callable[[], None]) -> None:
        before = commands(conn)
        cg.counting(True)
        fn()
        cg.counting(False)
        cg.control("-d", f"{setup}:{name}")
        after = commands(conn)
        ran = {c: n - before.get(c, 0) for c, n in after.items()
               if c != "info" and n != before.get(c, 0)}
        out[f"{setup}:{name}"] = {"jobs": jobs, "commands": ran}

    drive(clients, jobs, phase)
    for client in clients:
        client.close()


def annotate(path: Path) -> dict[str, int]:
    """Return the exclusive instructions per function of one callgrind dump."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=no",
                           str(path)], capture_output=True, text=True, check=False).stdout
    counts: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*?)\s*$", line)
        if not m or ":" not in m.group(2):
            continue
        fn = m.group(2).rsplit(":", 1)[1].split(" ")[0]
        counts[fn] = counts.get(fn, 0) + int(m.group(1).replace(",", ""))
    return counts


def collect(cg: CallgrindRedis, out: dict[str, dict[str, Any]]) -> None:
    """Read every dump of `cg` (after stop) into `out`: totals and per-function counts."""
    for path in cg.outputs():
        text = path.read_text(errors="replace")
        label = re.search(r"^desc: Trigger: dump (.*)$", text, re.MULTILINE)
        if label and label.group(1) in out:
            out[label.group(1)]["functions"] = annotate(path)


def group_of(function: str) -> str:
    """Return the group a redis-server function's instructions are reported under."""
    for name, pattern in GROUPS:
        if pattern.search(function):
            return name
    return "other"


def run(binary: str, jobs: int, shards: int, server_clock: bool) -> dict[str, dict[str, Any]]:
    """Measure the five setups; return per '<setup>:<phase>' its jobs, commands, functions."""
    out: dict[str, dict[str, Any]] = {}
    clock = None if server_clock else Clock(0.0002)
    tags = [f"{TAG}x{i}" for i in range(shards)]

    def client(target: Any, tag: str | None) -> Client:
        return Client(target, keyspace=tag, _clock=clock)

    with callgrind_redis(binary, "cluster-cost-") as cg:
        url = cg.url
        measure_on(cg, "default", [client(url, None)], jobs, out)
        measure_on(cg, "shard", [client(url, TAG)], jobs, out)
        measure_on(cg, "alternate", [client(url, t) for t in tags], jobs, out)
        cg.stop()
        collect(cg, out)
    port = cluster_port()
    with cluster_node(binary, port) as cg:
        rc = RedisCluster(host="127.0.0.1", port=port, decode_responses=True)
        measure_on(cg, "cluster", [client(rc, TAG)], jobs, out)
        measure_on(cg, "cluster-alternate", [client(rc, t) for t in tags], jobs, out)
        rc.close()
        cg.stop()
        collect(cg, out)
    return out


def render(out: dict[str, dict[str, Any]], top: int) -> str:
    """Return the text report: per setup and phase, instructions per job by group, commands
    per job; then the functions that differ most between neighbouring setups."""
    setups = list(dict.fromkeys(label.split(":")[0] for label in out))
    groups = [g for g, _ in GROUPS] + ["other"]
    lines = [f"{'per job (instructions)':24}" + "".join(f"{s:>18}" for s in setups)]
    for phase in PHASES:
        lines.append(f"{phase}:")
        per: dict[str, dict[str, float]] = {}
        for s in setups:
            d = out.get(f"{s}:{phase}", {})
            by = {g: 0.0 for g in groups}
            for fn, n in d.get("functions", {}).items():
                by[group_of(fn)] += n / d["jobs"]
            by["total"] = sum(by.values())
            per[s] = by
        for g in ["total", *groups]:
            lines.append(f"  {g:22}" + "".join(f"{per[s][g]:>18,.0f}" for s in setups))
        lines.append(f"  {'÷ default':22}" + "".join(
            f"{per[s]['total'] / per[setups[0]]['total']:>18.2f}" for s in setups))
        cmds = {s: out.get(f"{s}:{phase}", {}).get("commands", {}) for s in setups}
        lines.append(f"  {'commands per job':22}" + "".join(
            f"{sum(cmds[s].values()) / out[f'{s}:{phase}']['jobs']:>18.2f}" for s in setups))
        names = sorted({c for s in setups for c in cmds[s]})
        lines.append("    " + ", ".join(
            f"{c} " + "/".join(f"{cmds[s].get(c, 0) / out[f'{s}:{phase}']['jobs']:.2f}"
                               for s in setups) for c in names))
    for a, b in (("default", "shard"), ("shard", "cluster"), ("shard", "alternate"),
                 ("cluster", "cluster-alternate")):
        for phase in PHASES:
            fa = out.get(f"{a}:{phase}", {}).get("functions", {})
            fb = out.get(f"{b}:{phase}", {}).get("functions", {})
            if not fa or not fb:
                continue
            ja, jb = out[f"{a}:{phase}"]["jobs"], out[f"{b}:{phase}"]["jobs"]
            diff = {fn: fb.get(fn, 0) / jb - fa.get(fn, 0) / ja for fn in {*fa, *fb}}
            lines.append(f"{b} - {a}, {phase}: {sum(diff.values()):+,.0f} per job; "
                         f"largest functions:")
            for fn, d in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:top]:
                lines.append(f"    {d:>+10,.0f}  {fn}  [{group_of(fn)}]")
    return "\n".join(lines)


def node_counters(conn: redis.Redis) -> dict[str, float]:
    """Return a server's CPU seconds (user, sys), context switches and commands so far."""
    cpu = conn.info("cpu")
    status = Path(f"/proc/{conn.info('server')['process_id']}/status").read_text()

    def switches(kind: str) -> float:
        m = re.search(rf"^{kind}_ctxt_switches:\s+(\d+)", status, re.MULTILINE)
        return float(m.group(1)) if m else 0.0

    return {"user": float(cpu["used_cpu_user"]), "sys": float(cpu["used_cpu_sys"]),
            "wakeups": switches("voluntary"), "preempted": switches("nonvoluntary"),
            "commands": float(sum(n for c, n in commands(conn).items() if c != "info"))}


def wakeup_run(target: dict[str, Any], conns: list[redis.Redis], node_of: dict[str, int],
               procs: int, jobs: int) -> list[dict[str, float]]:
    """Run cluster.py's two phases; return per node its counters per job of its queues, less
    what it spends idle (measured over IDLE seconds just before)."""
    idle0 = [node_counters(c) for c in conns]
    time.sleep(bench.IDLE_SECONDS)
    idle1 = [node_counters(c) for c in conns]
    started = time.monotonic()
    before = [node_counters(c) for c in conns]
    result = bench.measure(target, conns, node_of, procs, jobs)
    after = [node_counters(c) for c in conns]
    seconds = time.monotonic() - started
    served = [result["enqueue"]["jobs_by_node"][i] for i in range(len(conns))]
    out = []
    for i in range(len(conns)):
        per: dict[str, float] = {}
        for k in ("user", "sys", "wakeups", "preempted", "commands"):
            idle = (idle1[i][k] - idle0[i][k]) / bench.IDLE_SECONDS * seconds
            per[k] = max(0.0, after[i][k] - before[i][k] - (idle if k != "commands" else 0))
            per[k] /= served[i]
        per["commands_per_wakeup"] = per["commands"] / per["wakeups"] if per["wakeups"] else 0
        per["client"] = sum(result[p]["client_us_per_job"] for p in bench.PHASES) / 1e6
        out.append(per)
    return out


def wakeups(binary: str, jobs: int) -> dict[str, list[dict[str, float]]]:
    """Measure the four setups of `--wakeups`; return per setup the per-node numbers."""
    out: dict[str, list[dict[str, float]]] = {}
    everywhere = dict.fromkeys(bench.QUEUES, 0)
    with RedisServer(binary, port=bench.free_port()) as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        conn = redis.Redis.from_url(url)
        out["1 node, 6 procs"] = wakeup_run({"url": url}, [conn], everywhere, 6, jobs)
        out["1 node, 2 procs"] = wakeup_run({"url": url}, [conn], everywhere, 2, jobs)
    servers = [RedisServer(binary, port=bench.free_port()).start() for _ in range(3)]
    try:
        urls = [f"redis://127.0.0.1:{server.port}/0" for server in servers]
        node_of = {q: i % 3 for i, q in enumerate(bench.QUEUES)}
        spread: dict[str, Any] = {"url_of": {q: urls[node_of[q]] for q in bench.QUEUES},
                                  "keyspace_of": {q: f"{TAG}{q}" for q in bench.QUEUES}}
        out["3 plain servers, 6 procs"] = wakeup_run(
            spread, [redis.Redis.from_url(u) for u in urls], node_of, 6, jobs)
    finally:
        for server in servers:
            server.stop()
    port = cluster_port()
    with RedisServer(binary, port=port, extra_args=[
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]) as server:
        conn = redis.Redis(unix_socket_path=server.socket_path, decode_responses=True)
        conn.execute_command(  # type: ignore[no-untyped-call]
            "CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + 30
        while conn.cluster("INFO")["cluster_state"] != "ok" and time.monotonic() < deadline:
            time.sleep(0.2)
        nodes = [f"redis://127.0.0.1:{port}"]
        shards = ShardedClient(nodes, shards=bench.SHARDS)
        tags = shards.tags
        shards.close()
        target: dict[str, Any] = {"nodes": nodes,
                                  "placement": dict(zip(bench.QUEUES, tags, strict=False))}
        out["1-node cluster, 6 procs"] = wakeup_run(target, [conn], everywhere, 6, jobs)
    with LocalCluster(binary, primaries=3, replicas=0) as cluster:
        placement = bench.pins(cluster)
        primaries = sorted(cluster.primaries(), key=lambda n: n.port)
        index = {n.port: i for i, n in enumerate(primaries)}
        node_of = {q: index[cluster.primary_for_key(f"ql:{{{placement[q]}}}:").port]
                   for q in bench.QUEUES}
        target = {"nodes": [f"redis://127.0.0.1:{n.port}" for n in primaries],
                  "placement": placement}
        out["3 primaries, 6 procs"] = wakeup_run(target, [n.conn() for n in primaries],
                                                 node_of, 6, jobs)
    return out


def render_wakeups(out: dict[str, list[dict[str, float]]]) -> str:
    """Return the text report of `--wakeups` (per node for the 3 primaries)."""
    lines = [f"{'per job, both phases':30}{'user µs':>9}{'sys µs':>9}{'wake-ups':>10}"
             f"{'preempted':>11}{'commands':>10}{'cmds/wake-up':>14}{'client µs':>11}"]
    for setup, nodes in out.items():
        for i, n in enumerate(nodes):
            name = setup if len(nodes) == 1 else f"{setup} #{i + 1}"
            lines.append(f"{name:30}{n['user'] * 1e6:>9,.1f}{n['sys'] * 1e6:>9,.1f}"
                         f"{n['wakeups']:>10.2f}{n['preempted']:>11.2f}{n['commands']:>10.1f}"
                         f"{n['commands_per_wakeup']:>14.1f}{n['client'] * 1e6:>11,.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run, print."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis-server", default=None, help="redis-server binary (default: PATH)")
    p.add_argument("--jobs", type=int, default=200, help="jobs per phase and setup")
    p.add_argument("--shards", type=int, default=4, help="keyspaces alternating")
    p.add_argument("--top", type=int, default=12, help="functions listed per difference")
    p.add_argument("--server-clock", action="store_true",
                   help="the production engine and the server's clock")
    p.add_argument("--json", default=None, help="also write the raw counts to this file")
    p.add_argument("--wakeups", action="store_true",
                   help="CPU and wake-ups per job on real servers (--jobs default 6000)")
    args = p.parse_args(argv)
    binary = args.redis_server or find_redis_server()
    if args.wakeups:
        found = wakeups(binary, args.jobs if args.jobs != 200 else 6000)
        print(f"load {os.getloadavg()}")
        print(render_wakeups(found))
        if args.json:
            Path(args.json).write_text(json.dumps(found, indent=1) + "\n")
        return 0
    try:
        out = run(binary, args.jobs, args.shards,
                  args.server_clock)
    except CallgrindError as exc:
        raise SystemExit(str(exc)) from exc
    print(render(out, args.top))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
