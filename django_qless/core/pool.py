"""The client's one connection pool: decoded replies and no automatic command retries."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from hiredis import pack_command
from redis.backoff import NoBackoff
from redis.retry import Retry

from .exceptions import InvalidArgument

__all__ = ["make_redis", "send"]


def send(conn: Any, args: Sequence[Any]) -> None:
    """Send one command on a redis-py connection.

    Engine calls carry only str and int arguments, so they are packed by hiredis (a
    dependency) directly: redis-py's own packer walks every argument first, ~8 µs a call.
    """
    conn.send_packed_command([pack_command(tuple(args))])


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
