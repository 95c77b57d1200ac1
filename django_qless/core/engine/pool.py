"""The client's one connection pool: decoded replies and no automatic command retries."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import redis
from hiredis import pack_command
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..exceptions import InvalidArgument

__all__ = ["IDLE_CHECK", "ensure_open", "make_redis", "send", "send_checked"]

#: A kept connection idle this long (seconds) is checked before use. A busy caller never pays
#: for it; an idle one pays one poll (about a microsecond) per call at most every 10 ms.
IDLE_CHECK = 0.01
_TRANSPORT_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


def send(conn: Any, args: Sequence[Any]) -> None:
    """Send one command on a redis-py connection.

    Engine calls carry only str and int arguments, so they are packed by hiredis (a
    dependency) directly: redis-py's own packer walks every argument first, ~8 µs a call.
    """
    conn.send_packed_command([pack_command(tuple(args))])


def ensure_open(conn: Any) -> None:
    """Drop `conn`'s socket if Redis closed it (a restart, an idle timeout) or left bytes on
    it while it sat unused; the next send connects afresh. Nothing is sent."""
    try:
        if not conn.can_read(0):
            return
    except _TRANSPORT_ERRORS:
        pass  # closed by the server (or a failed reconnect): start afresh
    conn.disconnect()


def send_checked(conn: Any, args: Sequence[Any], idle_since: float) -> float:
    """Send one command on a kept connection last used at `idle_since` (monotonic), checking
    it first if it sat idle; return the monotonic time it was sent at.

    The check runs before anything is sent, so it is safe for every command; a failure after
    sending is still the caller's to handle (only calls with an attempt token are repeated).
    """
    now = time.monotonic()
    if now - idle_since >= IDLE_CHECK:
        ensure_open(conn)
    send(conn, args)
    return now


def make_redis(url_or_redis: str | redis.Redis, socket_timeout: float | None) -> redis.Redis:
    """Build (or adapt) the one pool: decoded replies, no automatic command retries."""
    options: dict[str, Any] = {"decode_responses": True, "retry": Retry(NoBackoff(), 0)}
    if socket_timeout is not None:
        options["socket_timeout"] = socket_timeout
    if isinstance(url_or_redis, str):
        return redis.Redis.from_url(url_or_redis, **options)
    pool = url_or_redis.connection_pool
    kwargs = pool.connection_kwargs
    if kwargs.get("decode_responses") and socket_timeout is None:
        # Share the caller's pool; script calls bypass its retry policy anyway.
        return url_or_redis
    if type(pool) not in (redis.ConnectionPool, redis.BlockingConnectionPool):
        # Sentinel/cluster pools cannot be cloned from their kwargs alone.
        raise InvalidArgument(
            f"pass a redis.Redis built with decode_responses=True for a "
            f"{type(pool).__name__}, or set socket_timeout on it yourself"
        )
    new_pool = type(pool)(
        connection_class=pool.connection_class,
        max_connections=pool.max_connections,
        **{**kwargs, **options},
    )
    return redis.Redis(connection_pool=new_pool)
