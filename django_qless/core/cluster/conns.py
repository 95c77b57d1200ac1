"""Each thread's connection to each node of a cluster, kept between commands."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import AuthenticationError, AuthorizationError

from ..engine.invoke import IDLE_CHECK, ensure_open, send
from .args import NotSent

__all__ = ["NodeConnections"]

_TRANSPORT_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


class NodeConnections:
    """One connection per node and thread, from the pools of a redis-py `RedisCluster`."""

    def __init__(self, rc: RedisCluster, refresh: Callable[[], None]) -> None:
        """Take connections from `rc`'s pools; `refresh` re-reads the slot map when a node
        name is not in it."""
        self._rc = rc
        self._refresh = refresh
        self._local = threading.local()
        self._lock = threading.Lock()
        self._kept: list[list[Any]] = []  # every thread's connections, for close()

    def close(self) -> None:
        """Drop every thread's connections (back to their pools, disconnected)."""
        with self._lock:
            kept, self._kept = self._kept, []
        for pid, pool, conn, _ in kept:
            if pid == os.getpid():
                conn.disconnect()
                pool.release(conn)
        self._local.conns = {}

    def disconnect(self) -> None:
        """Close every thread's connections, each kept by its thread and opened again when
        that thread next uses it (safe while other threads hold theirs)."""
        pid = os.getpid()
        with self._lock:
            kept = [k[2] for k in self._kept if k[0] == pid]
        for conn in kept:
            conn.disconnect()

    def _conns(self) -> dict[str, list[Any]]:
        """Return this thread's connections by node name: [pid, pool, conn, last used]."""
        try:
            conns: dict[str, list[Any]] = self._local.conns
        except AttributeError:
            conns = self._local.conns = {}
        return conns

    def connection(self, name: str) -> Any:
        """Return this thread's open connection to node `name` (NotSent if none can be
        made: nothing was sent)."""
        conns = self._conns()
        kept = conns.get(name)
        pid = os.getpid()
        if kept is None or kept[0] != pid:  # none yet, or inherited across fork
            node = self._rc.get_node(node_name=name)  # type: ignore[no-untyped-call, unused-ignore]
            if node is None:
                self._refresh()
                node = self._rc.get_node(node_name=name)  # type: ignore[no-untyped-call, unused-ignore]
                if node is None:
                    raise NotSent(f"{name} is not in the slot map")
            pool = self._rc.get_redis_connection(node).connection_pool
            try:
                conn = pool.get_connection()
            except (AuthenticationError, AuthorizationError):
                raise
            except _TRANSPORT_ERRORS as exc:
                raise NotSent(str(exc)) from exc
            kept = conns[name] = [pid, pool, conn, time.monotonic()]
            with self._lock:
                self._kept.append(kept)
        conn = kept[2]
        now = time.monotonic()
        try:
            if now - kept[3] >= IDLE_CHECK:
                ensure_open(conn)  # closed by a restart or failover while idle
            if getattr(conn, "_sock", None) is None:
                conn.connect()
        except _TRANSPORT_ERRORS as exc:
            self.drop(name)
            raise NotSent(str(exc)) from exc
        kept[3] = now
        return conn

    def send(self, name: str, command: Sequence[Any], asking: bool = False) -> Any:
        """Send one command to node `name` on this thread's connection and read the reply."""
        conn = self.connection(name)
        try:
            if asking:
                send(conn, ("ASKING",))
            send(conn, command)
            if asking:
                conn.read_response()
            return conn.read_response()
        except redis.ResponseError:
            raise  # an error reply: the connection is fine
        except BaseException:
            self.drop(name)
            raise

    def drop(self, name: str) -> None:
        """Disconnect and forget this thread's connection to `name`."""
        kept = self._conns().pop(name, None)
        if kept is not None and kept[0] == os.getpid():
            with self._lock:
                self._kept = [k for k in self._kept if k is not kept]
            kept[2].disconnect()
            kept[1].release(kept[2])
