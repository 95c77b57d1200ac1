"""The client: one keyspace's engine channel, the server clock, the accessors, the calls."""

from __future__ import annotations

import functools
import json
import os
import socket
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from redis import Redis

from .engine.channel import TRANSPORT_ERRORS, Channel, NodeChannel, connection_error
from .engine.invoke import READ_ONLY_COMMANDS, Invoker, Keyspace, ServerClock, make_redis
from .exceptions import InvalidArgument, QlessConnectionError, QlessError
from .serialization import (
    check_jid,
    check_worker,
    dumps,
    num,
)

if TYPE_CHECKING:
    from redis.cluster import RedisCluster

    from .accessors import Config, Queues, Tags, Workers
    from .cluster.transport import ClusterTransport
    from .engine.deferred import DeferredCall
    from .events import Events
    from .flows import Flows
    from .hotpath import WorkerCalls
    from .job import Job
    from .jobs import Jobs
    from .recurring import RecurringJob
    from .routing import Router
    from .scheduling.ratelimit import RateLimits
    from .scheduling.schedules import Schedules
    from .throttle import Throttles

__all__ = ["Client"]

T = TypeVar("T")
# Pipelined calls get `now` staggered by this much so a batch keeps its FIFO order.
_STAGGER = 1e-6


def _arg(value: Any) -> str:
    """Encode one script argument."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise InvalidArgument(f"script arguments cannot be booleans, got {value!r}")
    if isinstance(value, (int, float)):
        return num(value)
    if isinstance(value, (dict, list, tuple)):
        return dumps(value)
    raise InvalidArgument(f"unsupported script argument type {type(value).__name__}")


class Client:
    """The qless data of one keyspace: a Redis database, or one shard of a Redis Cluster."""

    def __init__(
        self,
        target: str | Redis | Channel | RedisCluster | ClusterTransport
        = "redis://localhost:6379/0",
        *,
        worker_name: str | None = None,
        socket_timeout: float | None = None,
        engine: str | None = None,
        keyspace: str | None = None,
        _clock: Callable[[], float] | None = None,
    ) -> None:
        """Connect to `target`: a URL or `redis.Redis` of one server, or a ready `Channel`.

        `keyspace` names a shard's tag (None: the default `ql:` keyspace). A `RedisCluster`
        or `ClusterTransport` serves one shard of a cluster and needs `keyspace`; the cluster
        package builds its channel (`ShardedClient` places queues over many shards). `_clock`
        is a testing hook, not API: the client sends its time to an engine variant that takes
        it as given (docs/engine.md, "Server clock").
        """
        self._worker_name = None if worker_name is None else check_worker(worker_name)
        self._default_name = ""
        self._name_pid = -1
        self.server_clock = ServerClock(self.server_time)
        self._clock: Callable[[], float] = _clock if _clock is not None else self.server_clock
        self.keyspace = Keyspace(keyspace)
        self._owned: Callable[[], None] | None = None  # closes what this client built
        self.channel: Channel
        if isinstance(target, (str, Redis)):
            # auto: FCALL our function library (Redis 7+), EVALSHA where FCALL is unknown or
            # denied.
            mode = engine or os.environ.get("QLESS_ENGINE_CALL", "auto")
            invoker = Invoker(mode, caller_time=_clock is not None,
                              keys=self.keyspace.engine_keys)
            conn = make_redis(target, socket_timeout)
            if conn is not target:
                self._owned = conn.close
            self.channel = NodeChannel(conn, invoker)
        elif hasattr(target, "invoke_many"):
            self.channel = cast("Channel", target)  # a ready channel
        else:
            # A cluster: only a client of a shard loads the cluster package.
            from .cluster.shard_channel import open_shard_channel

            self.channel, self._owned = open_shard_channel(
                target, keyspace, engine, caller_time=_clock is not None)
        # The deployment of a shard made by ShardedClient (routing.py); None: this keyspace
        # is the whole deployment.
        self.router: Router | None = None

    def __repr__(self) -> str:
        return f"<Client {self.channel!r}>"

    # The accessors are made on first use, each module loaded then: a put loads no worker
    # calls, a worker no job listings (afterwards each is a plain instance attribute).

    @functools.cached_property
    def _hot(self) -> WorkerCalls:
        from .hotpath import WorkerCalls

        return WorkerCalls(self)

    @functools.cached_property
    def queues(self) -> Queues:
        """Return the queues of this keyspace, by name."""
        from .accessors import Queues

        return Queues(self)

    @functools.cached_property
    def jobs(self) -> Jobs:
        """Return the jobs of this keyspace, by jid."""
        from .jobs import Jobs

        return Jobs(self)

    @functools.cached_property
    def workers(self) -> Workers:
        """Return the workers known to this keyspace."""
        from .accessors import Workers

        return Workers(self)

    @functools.cached_property
    def config(self) -> Config:
        """Return the engine's settings in this keyspace."""
        from .accessors import Config

        return Config(self)

    @functools.cached_property
    def throttles(self) -> Throttles:
        """Return the named throttles of this keyspace."""
        from .throttle import Throttles

        return Throttles(self)

    @functools.cached_property
    def tags(self) -> Tags:
        """Return the tags of this keyspace's jobs."""
        from .accessors import Tags

        return Tags(self)

    @functools.cached_property
    def rate_limits(self) -> RateLimits:
        """Return the rate limits of this keyspace's queues and job kinds (loaded on first
        use: a put or a worker without limits never imports them)."""
        from .scheduling.ratelimit import RateLimits

        return RateLimits(self)

    @functools.cached_property
    def flows(self) -> Flows:
        """Return the workflows of this keyspace (chains, groups, chords)."""
        from .flows import Flows

        return Flows(self)

    @property
    def schedules(self) -> Schedules:
        """Return the cron schedules of this deployment."""
        from .scheduling.schedules import Schedules

        return Schedules(self)

    @property
    def redis(self) -> Any:
        """Return the redis-py client for plain reads and pub/sub (decoded strings; commands
        are not retried): a `Redis`, or a `RedisCluster` for a shard."""
        return self.channel.redis

    def node_redis(self) -> Redis:
        """Return a redis-py client of the server holding this keyspace now (pub/sub, SCAN,
        server commands; for a shard, its primary: ask again after a failover)."""
        return self.channel.node_redis()

    @property
    def shard(self) -> str | None:
        """Return this client's shard tag (None: the default keyspace of a single server)."""
        return self.keyspace.tag

    @property
    def worker_name(self) -> str:
        """Return this process's worker name (default `<hostname>-<pid>`, new after fork)."""
        if self._worker_name is not None:
            return self._worker_name
        pid = os.getpid()
        if pid != self._name_pid:
            self._default_name = check_worker(f"{socket.gethostname()}-{pid}")
            self._name_pid = pid
        return self._default_name

    def now(self) -> float:
        """Return the time sent to the engine: the server clock (or the testing hook's)."""
        return float(self._clock())

    def close(self, *, shared: bool = False) -> None:
        """Close the connections (a pool or cluster passed in by the caller only if
        `shared`)."""
        self.channel.close()
        if self._owned is not None:
            self._owned()
        elif shared:
            self.channel.close_shared()

    def disconnect(self) -> None:
        """Close the connections this client keeps open while it sits unused; it stays
        usable (the next call reconnects). On a cluster shard: every shard's, they share
        them."""
        self.channel.disconnect()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one deployment: the same surface as ShardedClient ------------------------------

    def clients(self) -> list[Client]:
        """Return every keyspace client of this deployment: this one."""
        return [self]

    def for_queue(self, queue: str) -> Client:
        """Return the client holding `queue`: this one."""
        return self

    def serving(self, queue: str) -> list[Client]:
        """Return the clients to take `queue`'s jobs from: this one."""
        return [self]

    def throttle_client(self, tid: str, *, queue: str | None = None) -> Client:
        """Return the client holding named throttle `tid`: this one."""
        return self

    def find_job(self, jid: str) -> Job | RecurringJob | None:
        """Return the job or recurring job `jid`, or None."""
        found = self.jobs.get(jid)
        return found if found is not None else self.jobs.recurring(jid)

    # -- plain reads (idempotent, so one retry on a transport error is safe) ----------------

    def read(self, fn: Callable[[Any], T], attempts: int = 3) -> T:
        """Run an idempotent read, retrying transport errors; wrap the last one."""
        for attempt in range(attempts):
            try:
                return fn(self.channel.redis)
            except TRANSPORT_ERRORS as exc:
                if attempt == attempts - 1:
                    raise connection_error(exc) from exc
        raise AssertionError("unreachable")

    def server_major(self) -> int:
        """Return the server's major version (Valkey reports its Redis-compatible one)."""
        info = self.read(lambda r: r.info("server"))
        return int(str(info.get("redis_version", "0")).split(".")[0])

    def server_time(self) -> float:
        """Return Redis `TIME` in epoch seconds."""
        seconds, micros = self.read(lambda _: self.channel.server_time())
        return int(seconds) + int(micros) / 1e6

    # -- engine calls (never retried: a re-sent pop hands out jobs nobody works) -----------

    @property
    def engine_mode(self) -> str:
        """Return how the engine is called: function (FCALL), script (EVALSHA) or auto."""
        return self.channel.mode

    def load_engine(self) -> None:
        """Load the engine the way this client calls it (function library or script)."""
        self.channel.load()

    def _invoke(self, argv: Sequence[str]) -> Any:
        """Call the engine once through the channel."""
        return self.channel.invoke(argv)

    def call(self, command: str, *args: Any) -> Any:
        """Run an engine command with the current time; return the raw reply.

        A command that only reads is sent once more after a transport error: it changed
        nothing, whether or not it ran.
        """
        argv = (command, repr(self.now()), *map(_arg, args))
        if command in READ_ONLY_COMMANDS:
            return self._invoke_twice(argv)
        return self._invoke(argv)

    def call_text(self, command: str, args: Sequence[str]) -> Any:
        """Run a writing engine command whose arguments are all text already (a validated
        put's): `call` without encoding each argument again."""
        return self._invoke((command, repr(self.now()), *args))

    def call_at(self, now: float, command: str, *args: Any) -> Any:
        """Run an engine command at `now` (epoch seconds; the engine uses its own clock if
        that is more than a second away); return the raw reply."""
        return self._invoke((command, repr(float(now)), *map(_arg, args)))

    def call_replayable(self, command: str, *args: Any) -> Any:
        """Run a command carrying an attempt token; after a lost reply, send it once more.

        The engine records what a token's call did, so the repeat returns that result instead
        of acting again (or being refused). A second transport error is raised: the outcome
        is then unknown to the caller, though the engine applied the call at most once.
        """
        return self._invoke_twice((command, repr(self.now()), *map(_arg, args)))

    def _invoke_twice(self, argv: Sequence[str]) -> Any:
        """Call the engine; after a transport error, send the identical call once more."""
        try:
            return self._invoke(argv)
        except QlessConnectionError:
            return self._invoke(argv)

    def call_json(self, command: str, *args: Any) -> Any:
        """Run an engine command whose reply is JSON and decode it (None stays None)."""
        reply = self.call(command, *args)
        return None if reply is None else json.loads(reply)

    def pipeline_calls(
        self, calls: Iterable[tuple[str, Sequence[Any]]], *, raise_on_error: bool = True
    ) -> list[Any]:
        """Run many engine commands in one round trip; return their raw replies in order.

        With `raise_on_error=False` failed calls are returned as QlessError instances.
        If the engine was flushed midway, only the calls that found it missing are run
        again (the others had executed); on a cluster, only the calls that did not run.
        """
        encoded = [(command, [_arg(a) for a in args]) for command, args in calls]
        for _, args in encoded:
            for arg in args:
                try:
                    arg.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise InvalidArgument(
                        f"argument is not valid UTF-8 text: {exc.reason}"
                    ) from None
        if not encoded:
            return []
        now = self.now()
        results = self.channel.invoke_many([
            (command, repr(now + index * _STAGGER), *args)
            for index, (command, args) in enumerate(encoded)
        ])
        if raise_on_error:
            for result in results:
                if isinstance(result, QlessError):
                    raise result
        return results

    # -- the worker's hot path (hotpath.WorkerCalls) ---------------------------------------

    def reserve(
        self, queues: Sequence[str], count: int = 1, worker: str | None = None,
        holding: Collection[str] = (), wait: float | None = None,
    ) -> tuple[list[Job], float | None]:
        """Pop up to `count` jobs from `queues` in order; also return seconds until due work
        (see `WorkerCalls.reserve`)."""
        return self._hot.reserve(queues, count, worker, holding, wait)

    def handed_jobs(self, messages: Sequence[dict[str, Any]], worker: str) -> list[Job]:
        """Build the Jobs the engine handed `worker` (decoded hand-off messages)."""
        return self._hot.handed_jobs(messages, worker)

    def complete_and_reserve(
        self, job: Job, queues: Sequence[str], count: int = 1
    ) -> tuple[str, list[Job], float | None]:
        """Complete `job` and reserve the next jobs in one round trip."""
        return self._hot.complete_and_reserve(job, queues, count)

    def send_complete_and_reserve(
        self, job: Job, queues: Sequence[str], count: int = 1
    ) -> DeferredCall[tuple[str, list[Job], float | None]]:
        """Send `complete_and_reserve` now; its `result()` reads the reply later, once."""
        return self._hot.send_complete_and_reserve(job, queues, count)

    def complete_many_and_reserve(
        self, jobs: Sequence[Job], queues: Sequence[str], count: int = 1
    ) -> tuple[list[str | QlessError], list[Job], float | None]:
        """Complete several jobs of one worker and reserve, in one round trip."""
        return self._hot.complete_many_and_reserve(jobs, queues, count)

    def send_complete_many(
        self, jobs: Sequence[Job], queues: Sequence[str], count: int = 1
    ) -> DeferredCall[tuple[list[str | QlessError], list[Job], float | None]]:
        """Send `complete_many_and_reserve` now; its `result()` reads the reply later, once."""
        return self._hot.send_complete_many(jobs, queues, count)

    def reap(self, queues: Sequence[str] | None = None) -> list[str]:
        """Re-offer jobs whose lease expired in `queues` (see `WorkerCalls.reap`)."""
        return self._hot.reap(queues)

    # -- accessors and shortcuts -------------------------------------------------------------

    def events(self, **kwargs: Any) -> Events:
        """Return an event listener for this client (not started)."""
        from .events import Events  # events builds on client: import at use, not at load

        return Events(self, **kwargs)

    def track(self, jid: str) -> bool:
        """Track a job: its events are published on the jid-only channels."""
        return bool(json.loads(self.call("track", "track", check_jid(jid))))

    def untrack(self, jid: str) -> bool:
        """Stop tracking a job."""
        return bool(json.loads(self.call("track", "untrack", check_jid(jid))))
