"""Where django-qless's Redis CPU and memory per job go (the worker path), on a private Redis.

Usage: `.venv/bin/python benchmarks/attribution.py [--jobs 5000] [--redis-server PATH]
[--callgrind 300] [--out FILE]`. See benchmarks/README.md, "Capacity".

1. A worker run (the core worker, 1 process, job body one INCR): INFO commandstats deltas per
   command (calls, usec, usec per call) and INFO cpu, per job. FCALL's usec includes the
   commands it runs; the rest of FCALL is the engine's own Lua; the rest of INFO cpu is
   Redis outside commands (reading requests, writing replies, the event loop, pub/sub).
2. A MONITOR trace of a few jobs: every command each engine call runs, with its key, grouped
   into categories (job record, history, locks, worker sets, queues, statistics, ...); each
   is priced with that command's usec per call from (1).
3. The price of one `redis.call` from Lua apart from the command itself: an FCALL of a tiny
   library calling SISMEMBER 200 times vs 0 times.
4. Memory: MEMORY USAGE, type and encoding of every key per waiting job after 1,000 puts,
   and the job hash's fields (name and value sizes).
5. With --callgrind N: redis-server under callgrind for N jobs through the worker;
   instructions per job by function family (Lua VM, redis.call glue, commands, networking),
   and inclusive: the engine's loading (the worker's start: on 6.2 each process's SCRIPT
   LOADs), the engine calls, each Redis command run, and the rest of the engine calls.

Load-robust numbers: the call counts, MEMORY USAGE, and callgrind's instruction counts;
commandstats usec and INFO cpu move with the machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "adapters"), str(HERE.parent)]

import _common  # noqa: E402
import redis  # noqa: E402
from callgrind_redis import CallgrindError, callgrind_redis  # noqa: E402
from django_qless_ import DjangoQless  # noqa: E402

from testservers.redis_server import RedisServer, find_redis_server  # noqa: E402

JID = re.compile(r"[0-9a-f]{32}")
DAY = re.compile(r":\d{9,11}:")

# (category, command pattern or None, key pattern): the first match names a Lua command.
CATEGORIES: list[tuple[str, str | None, str]] = [
    ("engine clock", "time", ""),
    ("config reads/writes", None, r"^ql:config$"),
    ("history", None, r"-history$"),
    ("dependents", None, r"-dependents$"),
    ("job record", None, r"^ql:j:[^:]+$"),
    ("locks", None, r"-locks$"),
    ("worker sets", None, r"^ql:w:|^ql:workers$|^ql:idle"),
    ("queue work/scheduled/recur", None, r"^ql:q:"),
    ("queue paused/throttle", None, r"^ql:paused_queues$|^ql:th:"),
    ("completed + retention", None, r"^ql:completed$"),
    ("statistics", None, r"^ql:s:"),
    ("events publish", "publish", r"^ql:log$"),
    ("hand-off/wake-up publish", "publish", r""),
]


def category(cmd: str, key: str) -> str:
    """Name the bookkeeping category of one command the engine ran."""
    for name, command, pattern in CATEGORIES:
        if command is not None and cmd != command:
            continue
        if pattern == "" or re.search(pattern, key):
            return name
    return "other"


def shape(key: str) -> str:
    """Return a key with jids and day stamps replaced by placeholders."""
    return DAY.sub(":<day>:", JID.sub("<jid>", key))


@contextlib.contextmanager
def server(binary: str) -> Iterator[str]:
    """Start a private redis-server; yield its URL."""
    with RedisServer(binary) as s:
        yield s.url


def worker_run(url: str, jobs: int) -> dict[str, Any]:
    """Run `jobs` jobs through the core worker (1 process); commandstats per job."""
    a = DjangoQless(url)
    result: dict[str, Any] = _common.measure_worker(a, jobs, 1, timeout=600)
    return result


def trace_run(url: str, jobs: int) -> list[tuple[str, list[str]]]:
    """MONITOR while the core worker runs `jobs` jobs; return the trace."""
    a = DjangoQless(url)
    _common._flush(url)
    a.fill(jobs, ["bench"])
    out: dict[str, Any] = {}
    seconds = 8.0
    t = threading.Thread(target=lambda: out.setdefault("t", _common.monitor(url, seconds)))
    t.start()
    time.sleep(0.3)
    with _common._running_worker(a, 1) as (ts, proc):
        ts.wait(jobs, 60, proc)
        time.sleep(0.3)
    t.join()
    trace: list[tuple[str, list[str]]] = out["t"]
    return trace


def group_calls(trace: list[tuple[str, list[str]]]) -> dict[str, list[list[list[str]]]]:
    """Return {engine command: [[lua command args]...] per call}; Lua lines follow their FCALL."""
    calls: dict[str, list[list[list[str]]]] = defaultdict(list)
    current: list[list[str]] | None = None
    for source, args in trace:
        if source == "client":
            name = args[0].lower()
            if name in ("fcall", "fcall_ro", "evalsha") and len(args) > 3:
                current = []
                calls[args[3]].append(current)
            else:
                current = None
                calls["client " + name].append([])
        elif current is not None:
            current.append(args)
    return calls


def bulk_run(url: str, jobs: int = 5000) -> dict[str, Any]:
    """put_many of `jobs` jobs (1,000 per Queue.put_many, 500 per engine call): where it goes.

    Returns per job: wall µs, client CPU µs, Redis CPU µs, commands and commandstats, and the
    Lua commands one put.many call runs for each job (MONITOR of a 10-job call).
    """
    import resource

    a = DjangoQless(url)
    r = redis.Redis.from_url(url)
    r.flushall()
    a.put(-1)  # the queue and config exist, as in the bench's enqueue
    r.config_resetstat()
    cpu0, before = _common.server_stats(r)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    a.put_bulk(jobs)
    wall = time.perf_counter() - start
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu1, after = _common.server_stats(r)
    delta = _common.stats_delta(before, after)
    out: dict[str, Any] = {
        "jobs": jobs, "wall_us": wall * 1e6 / jobs,
        "client_cpu_us": ((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime))
        * 1e6 / jobs,
        "redis_cpu_us": (cpu1 - cpu0) * 1e6 / jobs,
        "commandstats": {k: {"calls": v["calls"] / jobs, "usec": v["usec"] / jobs}
                         for k, v in sorted(delta.items(), key=lambda kv: -kv[1]["usec"])},
    }
    got: dict[str, Any] = {}
    t = threading.Thread(target=lambda: got.setdefault("t", _common.monitor(url, 1.0)))
    t.start()
    time.sleep(0.3)
    a._queue("bench").put_many([{"klass": "bench.noop", "data": {"i": i, "t0": 0.0}}
                                for i in range(10)])
    t.join()
    lua = Counter(f"{args[0].lower()} {shape(args[1]) if len(args) > 1 else ''}"
                  for src, args in got["t"] if src == "lua")
    out["lua_per_job_of_10"] = {k: v / 10 for k, v in lua.most_common()}
    return out


def lua_call_price(url: str, n: int = 200, reps: int = 200) -> dict[str, float]:
    """usec per redis.call from Lua beyond the command: FCALL of n SISMEMBERs vs of none."""
    r = redis.Redis.from_url(url)
    r.function_load(
        "#!lua name=benchprice\n"
        "redis.register_function('bp_calls', function(keys, args)\n"
        "  for i = 1, tonumber(args[1]) do redis.call('SISMEMBER', 'bp:set', 'x') end\n"
        "  return 1 end)\n",
        replace=True,
    )
    out: dict[str, float] = {}
    for count in (0, n):
        r.config_resetstat()
        for _ in range(reps):
            r.fcall("bp_calls", 0, count)
        stats = r.info("commandstats")
        out[f"fcall_usec_{count}"] = float(stats["cmdstat_fcall"]["usec_per_call"])
        out[f"sismember_usec_{count}"] = float(
            stats.get("cmdstat_sismember", {}).get("usec_per_call", 0.0))
    out["per_call_total_us"] = (out[f"fcall_usec_{n}"] - out["fcall_usec_0"]) / n
    out["command_us"] = out[f"sismember_usec_{n}"]
    out["glue_us"] = out["per_call_total_us"] - out["command_us"]
    r.function_delete("benchprice")
    return out


def engine_call_price(url: str, reps: int = 500) -> dict[str, float]:
    """usec per call of the cheapest engine command (config.get: TIME + one HGET inside).

    On 7.x that is an FCALL of the loaded library; on 6.2 an EVALSHA of the whole script,
    which first runs the script body (defining every engine function) on each call.
    """
    from django_qless.core import Client

    client = Client(url)
    r = redis.Redis.from_url(url)
    client.call("config.get", "heartbeat")  # load the engine
    r.config_resetstat()
    for _ in range(reps):
        client.call("config.get", "heartbeat")
    stats = r.info("commandstats")
    outer = next((stats[k] for k in ("cmdstat_fcall_ro", "cmdstat_fcall", "cmdstat_evalsha")
                  if k in stats), None)
    if outer is None:
        return {}
    inner = sum(float(stats[k]["usec"]) for k in ("cmdstat_time", "cmdstat_hget") if k in stats)
    total = float(outer["usec_per_call"])
    return {"usec_per_call": total, "inner_usec_per_call": inner / reps,
            "fixed_us": total - inner / reps, "calls": float(outer["calls"])}


def memory(url: str, jobs: int = 1000) -> dict[str, Any]:
    """MEMORY USAGE / type / encoding per key shape after `jobs` single puts."""
    a = DjangoQless(url)
    r = redis.Redis.from_url(url, decode_responses=True)
    r.flushall()
    a.put(-1)  # the first put creates config and per-queue keys
    before = int(r.info("memory")["used_memory"])
    for i in range(jobs):
        a.put(i)
    after = int(r.info("memory")["used_memory"])
    shapes: dict[str, dict[str, Any]] = {}
    for key in r.scan_iter(count=1000):
        s = shape(key)
        e = shapes.setdefault(s, {"keys": 0, "bytes": 0, "type": r.type(key),
                                  "encoding": r.object("encoding", key), "entries": 0})
        e["keys"] += 1
        e["bytes"] += int(r.memory_usage(key, samples=0) or 0)
        t = e["type"]
        e["entries"] += (r.hlen(key) if t == "hash" else r.zcard(key) if t == "zset" else
                         r.llen(key) if t == "list" else r.scard(key) if t == "set" else 1)
    jid = str(next(iter(r.zrange("ql:q:bench-work", 0, 0))))
    fields = {k: (len(k), len(v)) for k, v in r.hgetall(f"ql:j:{jid}").items()}
    config = {k: v for k, v in r.config_get("*max-listpack*").items()}
    config.update(r.config_get("*max-ziplist*"))
    return {"jobs": jobs, "used_memory_per_job": (after - before) / jobs, "shapes": shapes,
            "job_fields": fields, "listpack_limits": config}


def callgrind(binary: str, jobs: int) -> dict[str, Any]:
    """Run redis-server under callgrind while the worker runs `jobs` jobs; group the counts."""
    kept = Path(tempfile.gettempdir()) / "bench-callgrind.out"
    try:
        with callgrind_redis(binary, "bench-cg-") as cg:
            r = redis.Redis.from_url(cg.url)
            a = DjangoQless(cg.url)
            r.flushall()
            a.fill(50, ["bench"])  # warm-up (engine loaded, code paths touched): not counted
            with _common._running_worker(a, 1) as (ts, wproc):
                ts.wait(50, 300, wproc)
            a.fill(jobs, ["bench"])
            cg.counting(True)
            with _common._running_worker(a, 1) as (ts, wproc):  # counted: start-up + N jobs
                ts.wait(jobs, 600, wproc)
                time.sleep(0.2)
                cg.counting(False)
            cg.stop()
            text = cg.annotate(keep_as=kept.name)
    except CallgrindError as exc:
        return {"error": str(exc)}
    return {"jobs": jobs, "file": str(kept), "split": split(kept, jobs),
            **families(text, jobs, lua_range(binary))}


def lua_range(binary: str) -> tuple[int, int, int]:
    """Return (start of Lua, start of cjson's strbuf, end) addresses in a stripped binary.

    Distribution builds keep only exported symbols; the Lua VM's internal functions then show
    as bare addresses. They lie between the first exported lua_* function and cjson's strbuf.
    """
    nm = shutil.which("nm")
    if not nm:
        return (0, 0, 0)
    out = subprocess.run([nm, "-D", "--defined-only", binary], capture_output=True, text=True,
                         check=False).stdout
    addrs: dict[str, int] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            addrs[parts[2]] = int(parts[0], 16)
    lua = [a for n, a in addrs.items() if n.startswith(("lua_", "luaL_", "luaopen_"))]
    strbuf = [a for n, a in addrs.items() if n.startswith(("strbuf_", "fpconv_"))]
    if not lua or not strbuf:
        return (0, 0, 0)
    return (min(lua), min(strbuf), max(strbuf) + 0x2000)


# Function-name families for the callgrind self-cost (exclusive) profile.
FAMILIES = [
    ("number <-> text (libc strtod, printf %g)", r"^(_*strtod|__printf_fp|str_to_mpn|hack_digit|"
     r"__mpn_|round_and_return|__vfprintf|vfprintf|printf_positional|_IO_|__printf|"
     r"_*snprintf|__vsnprintf|_itoa|__strchrnul|outstring|group_number|__correctly_grouped)"),
    ("Lua VM (bytecode, tables, strings, GC)", r"^(lua[A-Z_]|luaV_|luaH_|luaS_|luaC_|luaD_|"
     r"luaF_|luaM_|luaG_|luaO_|luaT_|luaE_|luaZ_|luaK_|luaY_|luaX_|luaU_|luaL_|lua_|"
     r"str_|math_|tbl_|luaB_|auxsort|sort_comp|index2adr|luaI_|f_call|callrethooks|"
     r"resume|setarrayvector|rehash|numusearray|computesizes|mainposition|newkey|"
     r"luaopen|singlevar|sweeplist|propagatemark|reallymarkobject|traverse|"
     r"ll_|str_format|addquoted|scanformat|getn|unbound_search)"),
    ("cjson / cmsgpack / struct", r"^(json_|strbuf_|fpconv|lua_cjson|mp_|struct_)"),
    ("redis.call glue (args, replies)", r"^(luaRedis|luaReply|luaPush|redisProtocolToLua|"
     r"luaRaiseError|luaCreateArray|luaSetGlobal|luaCallFunction|luaExtract|luaGetFromRegistry|"
     r"scriptCall|scriptIs|scriptSet|scriptInterrupt|scriptVerify|scriptPrepare|scriptReset|"
     r"fcallCommand|fcallCommandGeneric|functionExtract|luaEngineCall|luaRedisGenericCommand|"
     r"evalGenericCommand|evalShaCommand|ldb|luaMaskCountHook|luaProtectedTable|"
     r"scriptRun|callReply|_callReply|parseReply|resp|ReplyParser)"),
    ("networking, protocol, event loop", r"^(readQueryFromClient|processMultibulkBuffer|"
     r"processInputBuffer|_addReply|addReply|writeToClient|_writeToClient|connSocket|"
     r"aeProcessEvents|aeApiPoll|epoll|sdsMakeRoomFor|processCommandAndReset|"
     r"handleClientsWithPendingWrites|clientInstallWriteHandler|prepareClientToWrite|"
     r"writevToClient|beforeSleep|afterSleep|whileBlockedCron|connUnix|connRead|connWrite|"
     r"lookupCommand|processCommand|call$|resetClient|createClient|freeClient|"
     r"__libc_read|__libc_write|__read|__write|read$|write$|writev|__writev|"
     r"pubsubPublishMessage|publishCommand|addReplyPubsub)"),
    ("malloc / free", r"^(je_|malloc|free|realloc|calloc|zmalloc|zfree|zcalloc|zrealloc|_int_|"
     r"ztrymalloc|ztryrealloc|extend_to_usable|sdsnew|sdsfree|sdsempty|sdsdup|"
     r"ld_|imalloc|ifree|tcache|arena_|large_|isfree|sz_)"),
    ("data structures (commands)", r"^(hash|hset|hget|hmget|hdel|zset|zadd|zrem|zpop|zsl|"
     r"zzl|zrange|zcard|generic|list|rpush|lpush|push|set|sadd|sismember|smembers|"
     r"lp|listpack|quicklist|dict|_dict|siphash|dbAdd|dbFind|lookupKey|signalModified|"
     r"notifyKeyspace|touchWatched|createObject|decrRefCount|incrRefCount|tryObjectEncoding|"
     r"createString|getDecoded|string2|ll2string|d2string|fpconv_dtoa|ld2string|"
     r"stringmatch|compareString|equalString|memcmp|__memcmp|__memcpy|memcpy|memmove|"
     r"__memmove|strlen|__strlen|incr|object|time|Command$|timeCommand|"
     r"updateKeyspace|keyHashSlot|serverLogObject|getLongLong|string2ll|ustime|mstime)"),
]


# The engine's loading (SCRIPT LOAD / FUNCTION LOAD: each process's first contact) and the
# engine calls, by their command functions' inclusive instructions.
LOADING = ("scriptCommand", "functionLoadCommand")
ENGINE_CALLS = ("evalShaCommand", "evalCommand", "fcallCommand", "fcallroCommand")
# Command functions that are not the engine's commands: dispatch, the client's own calls, and
# the bench job's body (the engine runs no INCR or INCRBY).
NOT_DATA = {"incrCommand", "incrbyCommand",
            "fcallCommand", "fcallroCommand", "scriptCommand", "helloCommand", "clientCommand",
            "subscribeCommand", "unsubscribeCommand", "pingCommand", "selectCommand",
            "infoCommand", "functionCommand", "commandCommand", "flushallCommand",
            "configCommand", "processCommand", "lookupCommand", "multiCommand", "execCommand"}


def split(out_file: str | Path, jobs: float) -> dict[str, float]:
    """Per job, inclusive instructions of the engine's loading, its calls, each Redis command
    run (by command function: on 6.2 and 7.x `<name>Command`), the Lua garbage collector
    (6.2's binary names it), and the rest (I/O, event loop, the client's own commands)."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                           str(out_file)], capture_output=True, text=True, check=False).stdout
    incl: dict[str, int] = {}
    total = 0
    for line in text.splitlines():
        if "PROGRAM TOTALS" in line:
            total = int(line.split()[0].replace(",", ""))
            continue
        m = re.match(r"^\s*([\d,]+)\s+\([\s\d.%]+\)\s+(\S+)", line)
        if not m:
            continue
        func = m.group(2).rsplit(":", 1)[-1].split("'")[0]
        incl[func] = max(incl.get(func, 0), int(m.group(1).replace(",", "")))
    out: dict[str, float] = {"total": total / jobs}
    out["engine loading (SCRIPT/FUNCTION LOAD)"] = sum(incl.get(f, 0) for f in LOADING) / jobs
    engine = sum(incl.get(f, 0) for f in ENGINE_CALLS)
    out["engine calls (EVALSHA/FCALL)"] = engine / jobs
    commands = {f: v for f, v in incl.items()
                if re.fullmatch(r"[a-z]+Command", f) and f not in NOT_DATA and f not in LOADING
                and f not in ENGINE_CALLS}
    for f, v in sorted(commands.items(), key=lambda kv: -kv[1]):
        out[f"  command {f[:-7].upper()}"] = v / jobs
    out["  Lua, redis.call glue, engine-call overhead (engine calls - commands)"] = (
        engine - sum(commands.values())) / jobs
    if "luaC_step" in incl:
        out["  of it Lua garbage collector (luaC_step)"] = incl["luaC_step"] / jobs
    return out


def families(annotated: str, jobs: int,
             lua: tuple[int, int, int] = (0, 0, 0)) -> dict[str, Any]:
    """Sum callgrind_annotate's exclusive Ir per function family; per job."""
    rows: list[tuple[int, str]] = []
    total = 0
    for line in annotated.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+(?:\([\s\d.%]+\)\s+)?\S*?:?(\S+)", line)
        if "PROGRAM TOTALS" in line:
            mt = re.match(r"^\s*([\d,]+)", line)
            if mt:
                total = int(mt.group(1).replace(",", ""))
            continue
        if not m or "file:function" in line:
            continue
        ir = int(m.group(1).replace(",", ""))
        func = line.split(":")[-1].split()[0] if ":" in line else m.group(2)
        func = func.split("'")[0]
        rows.append((ir, func))
    fam: Counter[str] = Counter()
    top: list[tuple[int, str, str]] = []
    for ir, func in rows:
        name = next((f for f, pat in FAMILIES if re.search(pat, func)), "other")
        if func.startswith("0x"):
            addr = int(func, 16)
            if lua[0] <= addr < lua[1]:
                name = "Lua VM + bundled libs (unnamed: VM, tables, strings, cjson)"
            elif lua[1] <= addr < lua[2]:
                name = "cjson / cmsgpack / struct"
            else:
                name = "redis (unnamed static functions)"
        fam[name] += ir
        top.append((ir, func, name))
    top.sort(reverse=True)
    counted = sum(fam.values())
    if total > counted:
        fam["below threshold"] += total - counted
    return {"total_ir_per_job": total / jobs,
            "families_ir_per_job": {k: v / jobs for k, v in fam.most_common()},
            "top_functions": [(f, n, ir / jobs) for ir, f, n in top[:30]]}


def report(doc: dict[str, Any]) -> str:
    """Format everything measured as text."""
    lines: list[str] = []
    w = doc["worker"]
    jobs = doc["jobs"]
    per = w["commandstats_per_job"]
    fcall = sum(v["usec"] for k, v in per.items() if k in ("fcall", "evalsha", "eval"))
    engine_calls = sum(v["calls"] for k, v in per.items() if k in ("fcall", "evalsha", "eval"))
    client_side = {"fcall", "evalsha", "eval", "incrby", "incr", "hello", "subscribe",
                   "ping", "client|setname", "client|setinfo", "unsubscribe", "select"}
    inner = {k: v for k, v in per.items() if k not in client_side}
    inner_usec = sum(v["usec"] for v in inner.values())
    outside = {k: v for k, v in per.items() if k in client_side and k not in
               ("fcall", "evalsha", "eval")}
    outside_usec = sum(v["usec"] for v in outside.values())
    cpu = w["redis_cpu_us_per_job"]
    lines += [
        f"redis {doc['redis_version']}  load {doc['load_start']} -> {doc['load_end']}  "
        f"{jobs} jobs through the core worker, 1 process, body one INCR",
        f"worker {w['jobs_per_s']:.0f} jobs/s; per job: {w['redis_commands_per_job']:.2f} "
        f"commands, Redis CPU (INFO cpu) {cpu:.1f} us",
        "",
        "1. INFO commandstats per job (calls include commands run from Lua)",
        f"{'command':22} {'calls/job':>10} {'usec/job':>9} {'usec/call':>10}",
    ]
    for k, v in per.items():
        if v["calls"] >= 0.01:
            lines.append(f"{k:22} {v['calls']:10.3f} {v['usec']:9.2f} "
                         f"{v['usec'] / v['calls']:10.2f}")
    lua_own = fcall - inner_usec
    lines += [
        "",
        f"Redis CPU per job {cpu:.1f} us =",
        f"  engine calls (FCALL/EVALSHA, {engine_calls:.2f}/job)      {fcall:6.1f} us, of which",
        f"    commands run from Lua ({sum(v['calls'] for v in inner.values()):.1f}/job)"
        f"          {inner_usec:6.1f} us",
        f"    the engine's own Lua + redis.call glue   {lua_own:6.1f} us",
        f"  other client commands (job body INCR, ...) {outside_usec:6.1f} us",
        f"  outside commands (I/O, parsing, replies, event loop, pub/sub delivery) "
        f"{cpu - fcall - outside_usec:6.1f} us",
    ]
    price = doc.get("price")
    if price:
        lines += ["", f"3. one redis.call from Lua costs {price['per_call_total_us']:.2f} us in "
                  f"FCALL, of which the command {price['command_us']:.2f} us and the glue "
                  f"(argument and reply conversion, client set-up) {price['glue_us']:.2f} us "
                  f"(SISMEMBER x200 in one FCALL)"]
    ep = doc.get("engine_price")
    if ep:
        lines += [f"   the cheapest engine call (config.get: TIME + HGET inside) costs "
                  f"{ep['usec_per_call']:.1f} us in Redis, {ep['fixed_us']:.1f} us of it before "
                  f"and around its two commands: the fixed price of every engine call"]
    calls = doc.get("calls")
    if calls:
        lines += ["", "2. what each engine call runs (MONITOR trace; per call, averaged)"]
        usec_per_call = {k: v["usec"] / v["calls"] for k, v in per.items() if v["calls"]}
        glue = price["glue_us"] if price else 0.0
        cat_total: Counter[str] = Counter()
        cat_calls: Counter[str] = Counter()
        for name, runs in sorted(calls.items(), key=lambda kv: -len(kv[1])):
            if not runs or not runs[0] and name.startswith("client"):
                lines.append(f"  {name}: {len(runs)} calls")
                continue
            sizes = [len(run) for run in runs]
            lines.append(f"  {name}: {len(runs)} calls, {statistics.median(sizes):.0f} Lua "
                         f"commands each (median)")
            shape_count: Counter[str] = Counter()
            for run in runs:
                for args in run:
                    cmd = args[0].lower()
                    key = args[1] if len(args) > 1 else ""
                    shape_count[f"{cmd} {shape(key)}"] += 1
            for sk, c in shape_count.most_common():
                cmd, _, key = sk.partition(" ")
                lines.append(f"      {c / len(runs):5.2f}x {cmd:16} {key:42} "
                             f"[{category(cmd, key)}]")
        # Price the categories over the whole worker run's steady state (complete.reserve).
        steady = calls.get("complete.reserve") or []
        for run in steady:
            for args in run:
                cmd = args[0].lower()
                key = args[1] if len(args) > 1 else ""
                cat = category(cmd, key)
                cat_total[cat] += usec_per_call.get(cmd, 0.0) + glue
                cat_calls[cat] += 1
        if steady:
            n = len(steady)
            lines += ["", f"   per job (complete.reserve, {n} calls): category, Lua commands, "
                      f"estimated us = commands' usec/call + {glue:.2f} us glue each"]
            for cat, us in cat_total.most_common():
                lines.append(f"      {cat:30} {cat_calls[cat] / n:5.2f} cmds {us / n:6.2f} us")
            est = sum(cat_total.values()) / n
            lines.append(f"      {'sum':30} {sum(cat_calls.values()) / n:5.2f} cmds "
                         f"{est:6.2f} us; FCALL {fcall / max(engine_calls, 1e-9):.1f} us per "
                         f"call, so the engine's Lua logic itself ~{fcall - est:.1f} us a job")
    bulk = doc.get("bulk")
    if bulk:
        cs = bulk["commandstats"]
        engine = sum(v["usec"] for k, v in cs.items() if k in ("fcall", "evalsha"))
        inner = sum(v["usec"] for k, v in cs.items() if k not in ("fcall", "evalsha"))
        lines += ["", f"6. bulk put_many, {bulk['jobs']} jobs (500 per engine call): per job "
                  f"{bulk['wall_us']:.1f} us wall, {bulk['client_cpu_us']:.1f} us client CPU, "
                  f"{bulk['redis_cpu_us']:.1f} us Redis CPU (engine calls {engine:.1f} us, of "
                  f"which commands {inner:.1f} us)",
                  "   commands per job: " + ", ".join(
                      f"{k} {v['calls']:.2f} ({v['usec']:.2f} us)" for k, v in cs.items()),
                  "   Lua commands per job in a 10-job put.many: " + ", ".join(
                      f"{k} {v:.1f}" for k, v in bulk["lua_per_job_of_10"].items())]
    mem = doc.get("memory")
    if mem:
        lines += ["", f"4. memory after {mem['jobs']} single puts: used_memory "
                  f"{mem['used_memory_per_job']:.0f} bytes per waiting job; MEMORY USAGE by key "
                  "shape (per job)",
                  f"{'key':34} {'type':6} {'encoding':10} {'keys':>6} {'entries/key':>11} "
                  f"{'bytes/job':>10}"]
        for s, e in sorted(mem["shapes"].items(), key=lambda kv: -kv[1]["bytes"]):
            lines.append(f"{s:34} {e['type']:6} {e['encoding']:10} {e['keys']:6} "
                         f"{e['entries'] / e['keys']:11.1f} {e['bytes'] / mem['jobs']:10.1f}")
        lines.append("job hash fields (name bytes + value bytes): " + ", ".join(
            f"{k} {a}+{b}" for k, (a, b) in mem["job_fields"].items()))
        total = sum(a + b for a, b in mem["job_fields"].values())
        lines.append(f"  {len(mem['job_fields'])} fields, {total} bytes of names and values; "
                     f"limits {mem['listpack_limits']}")
    cg = doc.get("callgrind")
    if cg:
        if "error" in cg:
            lines += ["", f"5. callgrind: {cg['error']}"]
        else:
            lines += ["", f"5. callgrind: {cg['total_ir_per_job']:,.0f} instructions per job "
                      f"in redis-server ({cg['jobs']} jobs); exclusive cost by family:"]
            for fam, ir in cg["families_ir_per_job"].items():
                lines.append(f"      {fam:42} {ir:10,.0f} {ir / cg['total_ir_per_job']:6.1%}")
            sp = cg.get("split") or {}
            if sp:
                load = sp["engine loading (SCRIPT/FUNCTION LOAD)"]
                lines.append(f"   inclusive per job: {sp['total'] - load:,.0f} after taking out "
                             f"the engine's loading at the worker's start ({load:,.0f}: "
                             "SCRIPT LOAD hashes and compiles, once per process)")
                for k, v in sp.items():
                    if k != "total":
                        lines.append(f"      {k:66} {v:10,.0f}")
            lines.append("   top functions (exclusive instructions per job):")
            for func, fam, ir in cg["top_functions"][:25]:
                lines.append(f"      {func:42} {ir:10,.0f}  [{fam}]")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run every part on one private Redis and print the report."""
    # The capacity table's job body (inherited by the workers); set here, not on import:
    # put_cost.py and manyqueues.py import this module's helpers.
    os.environ.setdefault("BENCH_BODY", "incr")
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--trace-jobs", type=int, default=40)
    p.add_argument("--redis-server", default=None)
    p.add_argument("--callgrind", type=int, default=0, metavar="N",
                   help="also profile N jobs with redis-server under callgrind")
    p.add_argument("--out", default=None, help="also write the report to this file")
    args = p.parse_args(argv)
    binary = args.redis_server or find_redis_server()
    doc: dict[str, Any] = {"jobs": args.jobs, "load_start": os.getloadavg()[0]}
    with server(binary) as url:
        version = str(redis.Redis.from_url(url).info("server")["redis_version"])
        doc["redis_version"] = version
        doc["worker"] = worker_run(url, args.jobs)
        print("worker run done", file=sys.stderr, flush=True)
        if not version.startswith("6."):
            doc["price"] = lua_call_price(url)
        doc["engine_price"] = engine_call_price(url)
        doc["calls"] = dict(group_calls(trace_run(url, args.trace_jobs)))
        print("trace done", file=sys.stderr, flush=True)
        doc["bulk"] = bulk_run(url)
        doc["memory"] = memory(url)
        print("memory done", file=sys.stderr, flush=True)
    if args.callgrind:
        doc["callgrind"] = callgrind(binary, args.callgrind)
    doc["load_end"] = os.getloadavg()[0]
    text = report(doc)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
