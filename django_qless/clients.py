"""Map ``QLESS`` aliases to core clients, like ``CACHES`` maps aliases to caches.

One client per alias per process: after a fork the child builds its own (redis-py pools are
per pid anyway, but the core client also caches its worker name and clock offset).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import Sentinel

from django_qless.core.client import Client
from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.exceptions import QlessConnectionError
from django_qless.settings import DEFAULT_ALIAS, AliasSettings, get_settings

__all__ = [
    "AnyClient",
    "ClientHandler",
    "build_client",
    "build_redis",
    "build_redis_cluster",
    "client",
    "clients",
    "get_client",
    "get_client_for_queue",
    "redis_kwargs",
]


#: What an alias gives: one server's client, or the client of queues sharded over a cluster.
#: Both have ``for_queue(queue)``, ``clients()`` and ``find_job(jid)``.
AnyClient = Client | ShardedClient


def redis_kwargs(conf: AliasSettings) -> dict[str, Any]:
    """Return the redis-py keyword arguments for an alias (no I/O)."""
    kwargs: dict[str, Any] = {
        "decode_responses": True,
        # A re-sent script call that changes state would run twice (see docs/guarantees.md, rule 2).
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 30,
    }
    if conf.username is not None:
        kwargs["username"] = conf.username
    if conf.password is not None:
        kwargs["password"] = conf.password
    if conf.socket_timeout is not None:
        kwargs["socket_timeout"] = conf.socket_timeout
    if conf.scheme == "rediss" or (conf.sentinels and conf.ssl_ca_certs):
        kwargs["ssl_cert_reqs"] = conf.ssl_cert_reqs
        if conf.sentinels or conf.cluster is not None:
            kwargs["ssl"] = True
        for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
            value = getattr(conf, name)
            if value is not None:
                kwargs[name] = value
    kwargs.update(conf.options)
    return kwargs


def build_redis(conf: AliasSettings) -> redis.Redis:
    """Build the redis.Redis of an alias (lazy: no connection is opened yet)."""
    kwargs = redis_kwargs(conf)
    if conf.sentinels:
        sentinel_kwargs = dict(conf.sentinel_kwargs)
        sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            list(conf.sentinels), sentinel_kwargs=sentinel_kwargs or None,
            **{k: v for k, v in kwargs.items() if k != "decode_responses"})
        master: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call, unused-ignore]
            conf.master_name or "mymaster", redis_class=redis.Redis, decode_responses=True)
        return master
    assert conf.url is not None
    conn = redis.Redis.from_url(conf.url, **kwargs)
    # from_url lets credentials in the URL win over keyword arguments; the documented rule
    # is the other way round (USERNAME/PASSWORD override the URL's). No connection is open
    # yet, so updating the pool's arguments is enough.
    pool_kwargs = conn.connection_pool.connection_kwargs
    for name in ("username", "password"):
        if getattr(conf, name) is not None:
            pool_kwargs[name] = getattr(conf, name)
    return conn


def build_redis_cluster(conf: AliasSettings) -> RedisCluster:
    """Build the RedisCluster of a cluster alias (this connects: it reads the slot map).

    Every node gets the alias's credentials and TLS settings; the cluster client itself
    never retries (the core's transport decides what may be sent again).
    """
    assert conf.cluster is not None
    nodes = [ClusterNode(host, port)  # type: ignore[no-untyped-call, unused-ignore]
             for host, port in conf.cluster.addresses]
    try:
        return RedisCluster(startup_nodes=nodes, **redis_kwargs(conf))
    except RedisClusterException as exc:
        # Not a RedisError: say it as the core says an unreachable server.
        raise QlessConnectionError(f"cannot read the slot map of QLESS[{conf.alias!r}] "
                                   f"({conf.display}): {exc}") from exc


def build_client(conf: AliasSettings) -> AnyClient:
    """Build an alias's client: a Client on its server, or a ShardedClient on its cluster."""
    if conf.cluster is None:
        return Client(build_redis(conf))
    cluster = conf.cluster
    return ShardedClient(build_redis_cluster(conf), shards=cluster.shards,
                         placement=dict(cluster.placement),
                         durable_replicas=cluster.durable_replicas,
                         durable_timeout_ms=cluster.durable_timeout_ms)


def _close(item: AnyClient) -> None:
    """Close a client built here, with its connections (pool or cluster client)."""
    if isinstance(item, ShardedClient):
        item.close()
        # The transport leaves a RedisCluster it was given open; this one is ours.
        item.transport.redis_cluster.close()
    else:
        item.close(shared=True)


class ClientHandler:
    """Lazily create and cache one core Client per alias, per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._clients: dict[str, AnyClient] = {}

    def __getitem__(self, alias: str) -> AnyClient:
        pid = os.getpid()
        with self._lock:
            if pid != self._pid:
                # Forked: the parent's clients hold the parent's identity; start fresh.
                self._clients = {}
                self._pid = pid
            found = self._clients.get(alias)
            if found is not None:
                return found
            conf = get_settings().aliases.get(alias)
            if conf is None:
                from django.core.exceptions import ImproperlyConfigured

                known = ", ".join(sorted(get_settings().aliases))
                raise ImproperlyConfigured(
                    f"Unknown qless alias {alias!r}: define QLESS[{alias!r}] (known: {known})."
                )
            created = build_client(conf)
            self._clients[alias] = created
            return created

    def __contains__(self, alias: str) -> bool:
        return alias in get_settings().aliases

    def all(self) -> list[AnyClient]:
        """Return the clients created so far in this process."""
        with self._lock:
            return list(self._clients.values()) if self._pid == os.getpid() else []

    def close_all(self) -> None:
        """Disconnect and forget every client (e.g. when settings change)."""
        with self._lock:
            old, self._clients = self._clients, {}
        if self._pid != os.getpid():
            return
        for item in old.values():
            try:
                _close(item)
            except redis.RedisError:  # closing is best effort
                pass

    def reset(self) -> None:
        """Forget every client without touching connections (after a fork)."""
        with self._lock:
            self._clients = {}
            self._pid = os.getpid()


clients = ClientHandler()


def get_client(alias: str = DEFAULT_ALIAS) -> AnyClient:
    """Return the core client of a ``QLESS`` alias (a ShardedClient for a cluster alias)."""
    return clients[alias]


def get_client_for_queue(queue: str) -> Client:
    """Return the client holding a queue: its alias's (``QLESS['QUEUES']``), on the queue's
    shard when the alias is sharded."""
    return clients[get_settings().alias_for_queue(queue)].for_queue(queue)


class _DefaultClientProxy:
    """Forward attribute access to the default alias's client (like ``django.db.connection``)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(clients[DEFAULT_ALIAS], name)

    def __repr__(self) -> str:
        return "<default qless client proxy>"


client: Client = _DefaultClientProxy()  # type: ignore[assignment]
