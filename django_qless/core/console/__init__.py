"""Read-only helpers behind the dashboard's console pages (no Django import).

- `find_by_klass(client, klass, ...)`: jobs of one class, by a bounded scan of the state
  indexes (the engine keeps no index by class).
- `histogram_percentiles(histogram, ps)`: p50/p95/p99 upper bounds from a daily histogram.
- `failures_per_day(client, days)`: failures counted per UTC day, from the daily stats.
- `failures_per_interval(client, intervals, seconds)`: jobs failed in each recent interval,
  from the failure records of the jobs still failed (a bounded read, newest first).
- `server_report(client)`: version, memory, clients, persistence and uptime of the server
  holding the client's keyspace (a shard's primary).
- `engine_slowlog(client, count)`: SLOWLOG entries of that server that call our engine;
  `read_engine_slowlog` says None when the server refuses SLOWLOG.
- `primaries(clients)`: the clients of distinct servers among a deployment's shards.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import redis

from ..engine.bundles import bundle_sha
from ..engine.lua import function_name, routes, script_sha
from ..health import SAFE_POLICY, eviction_policy
from ..serialization import check_int

if TYPE_CHECKING:
    from ..client import Client
    from ..job import Job

__all__ = [
    "KLASS_SCAN_CAP",
    "KLASS_STATES",
    "bucket_bounds",
    "engine_slowlog",
    "read_engine_slowlog",
    "failures_per_day",
    "failures_per_interval",
    "find_by_klass",
    "find_jobs",
    "histogram_percentiles",
    "last_change",
    "primaries",
    "search_match",
    "server_report",
]

# States a class search reads (every queue's index of each, then recent completions and
# failure groups); it stops after KLASS_SCAN_CAP jids, so a huge backlog costs a bounded read.
KLASS_STATES = ("running", "waiting", "scheduled", "stalled", "depends", "recurring",
                "throttled", "failed", "complete")
KLASS_SCAN_CAP = 5000
_CHUNK = 500


def _jids_in(client: Client, state: str, queues: Sequence[str], budget: int) -> Iterable[str]:
    """Yield up to `budget` jids of `state` (queue indexes, failure groups or completions)."""
    left = budget
    if state == "complete":
        offset = 0
        while left > 0:
            want = min(_CHUNK, left)
            jids = client.jobs.complete(offset, want)
            yield from jids
            left -= len(jids)
            offset += len(jids)
            if len(jids) < want:
                return
        return
    if state == "failed":
        for group in sorted(client.jobs.failed() or {}):
            start = 0
            while left > 0:
                page = client.jobs.failed(group, start, min(_CHUNK, left))
                jids = [j.jid for j in page.get("jobs") or []]
                yield from jids
                left -= len(jids)
                start += len(jids)
                if not jids or start >= int(page.get("total") or 0):
                    break
        return
    for name in queues:
        lister = getattr(client.queues[name].jobs, state)
        offset = 0
        while left > 0:
            jids = lister(offset, min(_CHUNK, left))
            yield from jids
            left -= len(jids)
            offset += len(jids)
            if len(jids) < _CHUNK:
                break


def last_change(job: Job) -> float:
    """Return the time of a job's latest history entry (its last change; 0 if none)."""
    best = 0.0
    for entry in job.history:
        try:
            best = max(best, float(entry.get("when") or 0))
        except (AttributeError, TypeError, ValueError):
            continue
    return best


def find_by_klass(
    client: Client, klass: str, *, states: Sequence[str] = KLASS_STATES,
    queues: Sequence[str] | None = None, limit: int = 100, scan: int = KLASS_SCAN_CAP,
    since: float | None = None,
) -> tuple[list[Job], bool]:
    """Return (jobs whose class is `klass`, whether the scan stopped at its cap).

    Reads at most `scan` jids in `states` (the queues' indexes, every failure group, the
    recent completions), in chunks of 500 fetched with one multiget each. `since` keeps the
    jobs whose last change (latest history entry) is at or after that time.
    """
    return find_jobs(client, lambda job: job.klass_name == klass, states=states,
                     queues=queues, limit=limit, scan=scan, since=since)


def search_match(text: str) -> Callable[[Job], bool]:
    """Return the search box's test: the class contains `text`, or the jid starts with it
    (both ignoring case: jids are lower-case hex, class paths are typed any way)."""
    needle = text.casefold()
    return lambda job: needle in str(job.klass_name).casefold() or str(job.jid).startswith(
        needle)


def find_jobs(
    client: Client, matches: Callable[[Job], bool], *, states: Sequence[str] = KLASS_STATES,
    queues: Sequence[str] | None = None, limit: int = 100, scan: int = KLASS_SCAN_CAP,
    since: float | None = None, jids: Iterable[str] | None = None,
) -> tuple[list[Job], bool]:
    """Return (jobs for which `matches` is true, whether the scan stopped at its cap).

    Reads at most `scan` jids: `jids` when given (a tag's, say), else those in `states` (the
    queues' indexes, every failure group, the recent completions), in chunks of 500 fetched
    with one multiget each; keeps the jobs in `states` and `queues` whose last change is at
    or after `since`.
    """
    check_int("limit", limit, 1, 100_000)
    check_int("scan", scan, 1, 100_000)
    wanted = [s for s in states if s in KLASS_STATES]
    names = list(queues) if queues is not None else client.queues.names()
    found: list[Any] = []
    seen: set[str] = set()
    read = 0
    batch: list[str] = []

    def flush() -> None:
        for job in client.jobs.get_many(*batch):
            in_queue = not queues or job.queue_name in names or job.state == "complete"
            recent = since is None or last_change(job) >= since
            in_state = jids is None or job.state in wanted
            if in_queue and recent and in_state and len(found) < limit and matches(job):
                found.append(job)
        batch.clear()

    sources = [iter(jids)] if jids is not None else (
        _jids_in(client, state, names, scan - read) for state in wanted)
    for source in sources:
        for jid in source:
            read += 1
            if jid in seen:
                continue
            seen.add(jid)
            batch.append(jid)
            if len(batch) >= _CHUNK:
                flush()
            if len(found) >= limit:
                return found, False
            if read >= scan:
                break
        if read >= scan:
            break
    if batch:
        flush()
    return found, read >= scan


def bucket_bounds(index: int) -> float:
    """Return the upper bound, in seconds, of a stats histogram bucket (148 buckets)."""
    if index < 60:
        return float(index + 1)
    if index < 119:
        return float((index - 58) * 60)
    if index < 142:
        return float((index - 117) * 3600)
    return float((index - 140) * 86400)


def histogram_percentiles(
    histogram: Sequence[Any], ps: Sequence[float] = (50, 95, 99)
) -> dict[float, float | None]:
    """Return, per percentile, the upper bound of the bucket it falls in (None if no data)."""
    counts = [max(0, int(v or 0)) for v in histogram]
    total = sum(counts)
    result: dict[float, float | None] = {}
    for p in ps:
        if total == 0:
            result[p] = None
            continue
        rank = p / 100 * total
        running = 0
        for i, n in enumerate(counts):
            running += n
            if running >= rank and n:
                result[p] = bucket_bounds(i)
                break
    return result


def failures_per_day(client: Client, days: int = 7, queues: Sequence[str] | None = None
                     ) -> list[tuple[dt.date, int]]:
    """Return (UTC day, failures) for the last `days` days, oldest first, all queues summed.

    Failures are the engine's daily per-queue `failures` counters (every failed attempt).
    """
    check_int("days", days, 1, 60)
    names = list(queues) if queues is not None else client.queues.names()
    now = float(client.now())
    today = dt.datetime.fromtimestamp(now, tz=dt.UTC).date()
    out = []
    for back in range(days - 1, -1, -1):
        day = today - dt.timedelta(days=back)
        noon = dt.datetime(day.year, day.month, day.day, 12, tzinfo=dt.UTC).timestamp()
        stats = client.queues.stats_many(names, noon) if names else {}
        out.append((day, sum(int(s.get("failures") or 0) for s in stats.values())))
    return out


def failures_per_interval(client: Client, intervals: int, seconds: float,
                          until: float | None = None, scan: int = KLASS_SCAN_CAP
                          ) -> tuple[list[int], bool]:
    """Count jobs that failed in each of the last `intervals` spans of `seconds`, oldest first.

    The engine counts failures per day only, so finer counts come from the failure records
    of jobs still in a failure group (a job retried since is not counted): each group is read
    newest first until its failures are older than the window, `scan` jobs at most in all.
    Returns the counts and whether the read stopped at `scan` (the counts are then low).
    """
    n = check_int("intervals", intervals, 1, 10_000)
    step = float(seconds)
    end = float(client.now()) if until is None else float(until)
    start = end - n * step
    counts = [0] * n
    budget = check_int("scan", scan, 1)
    for group in sorted(client.jobs.failed()):
        offset = 0
        while budget > 0:
            page = client.jobs.failed(group, offset, min(_CHUNK, budget))
            jobs = page["jobs"]
            budget -= len(jobs)
            offset += len(jobs)
            older = False
            for job in jobs:
                when = float((job.failure or {}).get("when") or 0)
                if when <= start:
                    older = True  # the rest of the group (newest first) is older still
                elif when <= end:
                    counts[min(int((when - start) // step), n - 1)] += 1
            if older or offset >= int(page["total"]) or not jobs:
                break
        if budget <= 0:
            return counts, True
    return counts, False


def _info(conn: Any, section: str) -> dict[str, Any]:
    try:
        return dict(conn.info(section))
    except redis.ResponseError:  # a section a managed server hides is just left out
        return {}


def node_name(client: Client) -> str:
    """Return `host:port` (or the socket path) of the server holding a client's keyspace."""
    kwargs = client.node_redis().connection_pool.connection_kwargs
    if kwargs.get("path"):
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def primaries(clients: Iterable[Client]) -> list[tuple[str, list[Client]]]:
    """Group a deployment's keyspace clients by the server holding each now: [(node, the
    clients there)], in first-seen order (shards sharing a primary are read once)."""
    nodes: dict[str, list[Client]] = {}
    for client in clients:
        nodes.setdefault(node_name(client), []).append(client)
    return list(nodes.items())


def server_report(client: Client) -> dict[str, Any]:
    """Return what an operator checks first about the server holding the client's keyspace
    (missing values are None)."""
    conn = client.node_redis()
    server = _info(conn, "server")
    memory = _info(conn, "memory")
    clients = _info(conn, "clients")
    persistence = _info(conn, "persistence")
    policy = eviction_policy(conn)
    try:
        fsync = str(dict(conn.config_get("appendfsync")).get("appendfsync") or "") or None
    except redis.ResponseError:  # CONFIG may be denied on managed Redis
        fsync = None
    valkey = server.get("valkey_version")
    return {
        "product": "Valkey" if valkey else "Redis",
        "version": str(valkey or server.get("redis_version") or "unknown"),
        "redis_version": server.get("redis_version"),
        "mode": server.get("redis_mode"),
        "uptime": server.get("uptime_in_seconds"),
        "used_memory": memory.get("used_memory"),
        "used_memory_peak": memory.get("used_memory_peak"),
        "maxmemory": memory.get("maxmemory"),
        "policy": policy,
        "policy_safe": policy == SAFE_POLICY,
        "connected_clients": clients.get("connected_clients"),
        "blocked_clients": clients.get("blocked_clients"),
        "aof_enabled": bool(persistence.get("aof_enabled")) if persistence else None,
        "appendfsync": fsync,
        "rdb_last_save": persistence.get("rdb_last_save_time"),
        "rdb_last_status": persistence.get("rdb_last_bgsave_status"),
        "rdb_changes_since_save": persistence.get("rdb_changes_since_last_save"),
    }


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def engine_slowlog(client: Client, count: int = 128) -> list[dict[str, Any]]:
    """Return the slow-log entries that call our engine (FCALL of its function, EVALSHA of
    its script), newest first: {"id", "start", "duration_us", "command", "args"}; [] when
    the server refuses SLOWLOG (see `read_engine_slowlog`)."""
    return read_engine_slowlog(client, count) or []


def read_engine_slowlog(client: Client, count: int = 128) -> list[dict[str, Any]] | None:
    """As `engine_slowlog`, but None when the server refuses SLOWLOG (an ACL user without
    it, a managed server that renames it): "nothing slow" and "cannot tell" differ."""
    check_int("count", count, 1, 1024)
    ours = {function_name(False), function_name(True), script_sha(False), script_sha(True)}
    try:
        entries = client.node_redis().slowlog_get(count)
    except redis.ResponseError:  # (NOPERM is one; a connection error is not caught)
        return None
    out = []
    for entry in entries:
        raw = entry.get("command") or b""
        words = _text(raw).split(" ")
        if len(words) < 2 or words[0].upper() not in ("FCALL", "FCALL_RO", "EVALSHA"):
            continue
        target = words[1]
        # words[2] is numkeys (0, or 1 with a shard's prefix as the key); then the engine
        # command and its arguments.
        skip = 3 + (int(words[2]) if len(words) > 2 and words[2].isdigit() else 0)
        named = words[skip] if len(words) > skip else ""
        if (target not in ours and not target.startswith("djqless_") and not (
                named in routes() and target in (bundle_sha(named, False),
                                                 bundle_sha(named, True)))):
            continue  # (a 6.2 client calls each command's own script: lua_bundles.bundle_text)
        out.append({"id": entry.get("id"), "start": entry.get("start_time"),
                    "duration_us": entry.get("duration"),
                    "command": words[skip] if len(words) > skip else "",
                    "args": " ".join(words[skip + 1:])[:300]})
    return out
