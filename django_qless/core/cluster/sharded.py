"""Queues placed over the shards of a Redis Cluster: one `Client` per shard, one transport.

A `ShardedClient` is what a single-node `Client` is to one server: `for_queue(name)` returns
the client of the queue's shard (placement.py decides which, and records it), `clients()`
every shard's client (for listings, stats, audits), `find_job(jid)` looks a bare jid up in
every shard with one round trip per primary. A job, once found or reserved, holds its
shard's client, so everything done with it goes to its shard without a look-up.

Each shard's client holds this object as `client.router` (routing.py's `Router`): a job
completed into a queue of another shard, and the checks that dependencies and named throttles
share the put's shard, go through it. A named throttle's home shard is its explicit setting,
else the one recorded in `ql:{<tag of s0>}:throttle-homes` at its first use.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import redis
from redis.cluster import RedisCluster

from ..client import Client
from ..exceptions import InvalidArgument, error_from_reply
from ..job import Job
from ..recurring import RecurringJob
from ..serialization import as_list, check_jid, check_text, check_worker
from ..throttle import Throttle
from .batch import execute_many
from .placement import Placement
from .shard_channel import ShardChannel, open_shard_channel
from .transport import ClusterTransport

if TYPE_CHECKING:
    from ..scheduling.schedules import Schedules

__all__ = ["ShardedClient"]


class ShardedClient:
    """Queues spread over `shards` keyspaces of one Redis Cluster (or Valkey cluster)."""

    def __init__(
        self,
        cluster: RedisCluster | str | Sequence[str],
        *,
        shards: int = 16,
        placement: Mapping[str, int | str] | None = None,
        throttles: Mapping[str, int | str] | None = None,
        durable_replicas: int = 0,
        durable_timeout_ms: int = 1000,
        worker_name: str | None = None,
        socket_timeout: float | None = None,
        engine: str | None = None,
        _clock: Callable[[], float] | None = None,
    ) -> None:
        """Use `cluster` (a RedisCluster with decoded replies, or node URLs); `placement`
        pins queues to shards (index or tag), `throttles` named throttles' home shards;
        `durable_replicas` > 0 waits for that many replicas to confirm every write
        (docs/scaling.md, "What failover can lose")."""
        self._worker_name = None if worker_name is None else check_worker(worker_name)
        self._clock = _clock
        self.engine = engine or os.environ.get("QLESS_ENGINE_CALL", "auto")
        self.transport = ClusterTransport(
            cluster, engine=self.engine, caller_time=_clock is not None,
            durable_replicas=durable_replicas, durable_timeout_ms=durable_timeout_ms,
            socket_timeout=socket_timeout)
        self.placement = Placement(self.transport, shards, placement)
        self.tags: list[str] = list(self.placement.tags)
        self._clients: dict[str, Client] = {}
        self._homes_key = f"{self.placement.home}throttle-homes"
        self._homes: dict[str, str] = {
            check_text("throttle id", tid, 128): self.placement.tag_of(shard)
            for tid, shard in (throttles or {}).items()}
        self._explicit_homes = frozenset(self._homes)
        self._moving: tuple[dict[str, Any], float] = ({}, 0.0)  # markers, read again after

    def __repr__(self) -> str:
        return f"<ShardedClient {len(self.tags)} shards on {', '.join(self.transport.nodes())}>"

    @property
    def schedules(self) -> Schedules:
        """Return the cron schedules of this deployment (each in its queue's shard)."""
        from ..scheduling.schedules import Schedules

        return Schedules(self)

    @property
    def shards(self) -> int:
        """Return the number of shards queues are placed over."""
        return len(self.tags)

    def shard(self, shard: int | str) -> Client:
        """Return the client of shard `shard` (an index, `s<i>`, or a tag)."""
        tag = self.placement.tag_of(shard)
        found = self._clients.get(tag)
        if found is None:
            channel, _ = open_shard_channel(self.transport, tag, self.engine,
                                            caller_time=self._clock is not None)
            found = self._clients[tag] = Client(
                channel, keyspace=tag, worker_name=self._worker_name, _clock=self._clock)
            found.router = self
        return found

    def clients(self) -> list[Client]:
        """Return every shard's client, in shard index order."""
        return [self.shard(tag) for tag in self.tags]

    def for_queue(self, queue: str) -> Client:
        """Return the client of `queue`'s shard (recording its placement at first use)."""
        return self.shard(self.placement.shard_of(queue))

    def serving(self, queue: str) -> list[Client]:
        """Return the clients a worker reserves `queue` from: its shard's, and while the
        queue is marked moving, the source's and the target's (docs/scaling.md); the markers
        are read at most once per placement cache time."""
        home = self.for_queue(queue)
        now = time.monotonic()
        if self._moving[1] <= now:  # read again after the placement cache time
            self._moving = (self.placement.moving(), now + self.placement.cache_seconds)
        marker = self._moving[0].get(queue)
        if marker is None:
            return [home]
        return list(dict.fromkeys([home, self.shard(marker["from"]), self.shard(marker["to"])]))

    def shard_of(self, queue: str) -> str:
        """Return the tag of `queue`'s shard without recording a placement."""
        return self.placement.shard_of(queue, record=False)

    def find_job(self, jid: str) -> Job | RecurringJob | None:
        """Return job (or else recurring job) `jid` from whichever shard holds it, asking
        every shard in one round trip per primary."""
        jid = check_jid(jid)
        clients = self.clients()
        commands = []
        for client in clients:
            channel = client.channel
            assert isinstance(channel, ShardChannel)
            now = repr(client.now())
            commands.append(channel.command(("get", now, jid)))
            commands.append(channel.command(("recur.get", now, jid)))
        replies = execute_many(self.transport, commands)
        for reply in replies:
            if isinstance(reply, redis.ResponseError):
                raise error_from_reply(reply)
        for index, client in enumerate(clients):
            job = replies[2 * index]
            if job is not None:
                return Job(client, json.loads(job))
        for index, client in enumerate(clients):
            recurring = replies[2 * index + 1]
            if recurring is not None:
                return RecurringJob(client, json.loads(recurring))
        return None

    def locate(self, jids: Sequence[str]) -> dict[str, str]:
        """Return the shard tag of each of `jids` found in some shard (one multiget per shard,
        one round trip per primary); a jid in no shard is absent from the answer."""
        wanted = [check_jid(jid) for jid in jids]
        if not wanted:
            return {}
        clients = self.clients()
        commands = []
        for client in clients:
            channel = client.channel
            assert isinstance(channel, ShardChannel)
            commands.append(channel.command(("multiget", repr(client.now()), *wanted)))
        found: dict[str, str] = {}
        for client, reply in zip(clients, execute_many(self.transport, commands), strict=True):
            if isinstance(reply, redis.ResponseError):
                raise error_from_reply(reply)
            for job in as_list(json.loads(reply)):
                found.setdefault(str(job["jid"]), str(client.shard))
        return found

    def throttle_home(self, tid: str, shard: str) -> str:
        """Return the home shard of named throttle `tid`: its setting, else its record, else
        `shard`, recorded now (HSETNX: racing first uses agree on the first writer)."""
        home = self._homes.get(tid)
        if home is None:
            key = self._homes_key
            self.transport.execute(("HSETNX", key, tid, self.placement.tag_of(shard)), key=key)
            home = self._homes[tid] = str(self.transport.execute(("HGET", key, tid), key=key))
        return home

    def throttle_client(self, tid: str, *, queue: str | None = None) -> Client:
        """Return the client of named throttle `tid`'s home shard; one never used gets the
        shard of `queue` as its home (InvalidArgument without a queue: its home would be a
        guess)."""
        tid = check_text("throttle id", tid, 128)
        if tid in self._explicit_homes:
            return self.shard(self._homes[tid])
        key = self._homes_key
        recorded = self._homes.get(tid) or self.transport.execute(("HGET", key, tid), key=key)
        if recorded is None:
            if queue is None:
                raise InvalidArgument(
                    f"throttle {tid!r} has no home shard yet: it gets the shard of the first "
                    f"queue whose jobs use it (or name it in ShardedClient(throttles=...))")
            recorded = self.throttle_home(tid, self.placement.shard_of(queue))
        self._homes[tid] = str(recorded)
        return self.shard(str(recorded))

    def throttle(self, tid: str, *, queue: str | None = None) -> Throttle:
        """Return named throttle `tid` on its home shard (see `throttle_client`)."""
        return self.throttle_client(tid, queue=queue).throttles[tid]

    @property
    def worker_name(self) -> str:
        """Return this process's worker name (the same in every shard)."""
        return self.shard(0).worker_name

    def close(self) -> None:
        """Close the transport and the cluster client it built."""
        for client in self._clients.values():
            client.close()
        self.transport.close()

    def disconnect(self) -> None:
        """Close the connections the shards keep open while unused (they share them); the
        client stays usable (the next call reconnects)."""
        self.transport.disconnect()

    def __enter__(self) -> ShardedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
