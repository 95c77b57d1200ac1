"""Deployment health probes for the worker and the Django checks (no Django import).

- `eviction_policy(redis)`: the server's `maxmemory-policy` (CONFIG GET, falling back to
  INFO memory where managed Redis forbids CONFIG).
- `check_eviction(redis)`: a warning text unless the policy is `noeviction` (any other
  policy can drop a job hash and leave its jid in a queue).
- `clock_skew(redis, clock=time.time)`: local clock minus the Redis server clock, measured
  at the midpoint of a TIME round trip (positive: this host runs ahead).
- `probe(redis)`: PING, then both of the above, as a `ServerProbe`.
- `ACL_KEYS`, `ACL_CHANNELS`: the ACL selectors that cover every key and channel we use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import redis

from .engine.invoke import DEFAULT

__all__ = [
    "ACL_CHANNELS",
    "ACL_KEYS",
    "SAFE_POLICY",
    "UNREACHABLE_ERRORS",
    "ServerProbe",
    "check_eviction",
    "clock_skew",
    "eviction_policy",
    "is_cluster_node",
    "probe",
]

SAFE_POLICY = "noeviction"
# What redis-py raises when the server cannot be reached (for callers that do not import it).
UNREACHABLE_ERRORS: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)
# The default keyspace's pattern `ql:*` also covers every shard keyspace (`ql:{<tag>}:...`),
# keys and (sharded) channels alike.
ACL_KEYS = "~" + DEFAULT.pattern()
ACL_CHANNELS = "&" + DEFAULT.pattern()


class ServerProbe(NamedTuple):
    """What a deployment check needs to know about one server."""

    policy: str  # maxmemory-policy
    skew: float  # local clock minus server clock, seconds
    cluster_node: bool = False  # a node of a Redis Cluster (reached by a plain URL)


def _conn(client_or_redis: Any) -> redis.Redis:
    """Accept a core Client (its keyspace's server: a shard's primary) or a redis.Redis."""
    node = getattr(client_or_redis, "node_redis", None)
    conn = node() if callable(node) else client_or_redis
    if not isinstance(conn, redis.Redis):
        raise TypeError(f"expected a Client or redis.Redis, got {type(client_or_redis).__name__}")
    return conn


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def eviction_policy(client_or_redis: Any) -> str:
    """Return the server's maxmemory-policy, e.g. 'noeviction' ('unknown' if unreadable)."""
    conn = _conn(client_or_redis)
    try:
        reply = conn.config_get("maxmemory-policy")
        for name, value in dict(reply).items():
            if _text(name) == "maxmemory-policy":
                return _text(value)
    except redis.ResponseError:
        pass  # CONFIG may be renamed or denied on managed Redis: INFO still says it
    info = conn.info("memory")
    value = info.get("maxmemory_policy")
    return _text(value) if value is not None else "unknown"


def check_eviction(client_or_redis: Any) -> str | None:
    """Return a warning when Redis may evict keys (the policy is not noeviction), else None."""
    policy = eviction_policy(client_or_redis)
    if policy == SAFE_POLICY:
        return None
    return (
        f"Redis maxmemory-policy is {policy!r}, not 'noeviction': under memory pressure Redis "
        f"may delete job hashes or queue indexes and lose jobs silently. Set "
        f"'maxmemory-policy noeviction' on the server that holds qless data."
    )


def clock_skew(client_or_redis: Any, clock: Callable[[], float] = time.time) -> float:
    """Return local clock minus server clock, in seconds (midpoint of a TIME round trip)."""
    conn = _conn(client_or_redis)
    before = clock()
    seconds, micros = conn.time()
    after = clock()
    server = int(seconds) + int(micros) / 1e6
    return (before + after) / 2.0 - server


def probe(client_or_redis: Any) -> ServerProbe:
    """PING the server, then read its eviction policy and clock skew (RedisError if down)."""
    conn = _conn(client_or_redis)
    conn.ping()
    return ServerProbe(eviction_policy(conn), clock_skew(conn), is_cluster_node(conn))


def is_cluster_node(client_or_redis: Any) -> bool:
    """Tell whether the server runs in cluster mode (`cluster_enabled:1` in INFO)."""
    info = _conn(client_or_redis).info("cluster")
    return str(info.get("cluster_enabled", "0")) == "1"
