"""Send engine commands to the cluster primary owning their shard, following the cluster.

A shard is one qless keyspace in one hash slot (`ql:{<tag>}:...`); an engine call declares its
prefix as its one key, so the slot of that key names the primary that must run it. This
transport keeps the slot map of a redis-py `RedisCluster` (its nodes manager) and one
connection per primary and thread, and decides, reply by reply, whether a command may be
sent again. The rules (docs/scaling.md): a command is resent only when it did not run
(MOVED, TRYAGAIN, CLUSTERDOWN, LOADING, a missing engine, a refused connect) or when it only
reads; a transport error after the bytes left leaves a write's outcome unknown, so it is
raised, never resent. ASK is followed only for commands that declare every key they touch:
an engine call declares its prefix alone, and run on the importing node it would see only
the keys moved so far, so it waits until the slot has moved instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import redis
from hiredis import pack_command
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)

from ..engine.lua import library_text, script_text
from ..exceptions import InvalidArgument, QlessConnectionError
from .args import (
    SCRIPT_CALLS,
    NotDurable,
    NotRun,
    NotSent,
    build_cluster,
    declared_key,
    engine_names,
    only_reads,
    redirect_target,
    sha1,
)
from .conns import NodeConnections

__all__ = ["ClusterTransport", "NotDurable", "NotRun", "declared_key"]

_TRANSPORT_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
# Bounds every loop: at most this many sends of one command, however the cluster answers.
_MAX_SENDS = 400
_BACKOFF_FIRST, _BACKOFF_CAP = 0.01, 0.25
# MOVED replies followed at once; more in one call means the nodes disagree: back off.
_QUICK_REDIRECTS = 3


class ClusterTransport:
    """Route one command at a time to the primary owning its declared key's slot."""

    def __init__(
        self,
        cluster: RedisCluster | str | Sequence[str],
        *,
        engine: str = "auto",
        caller_time: bool = False,
        libraries: Sequence[str] = (),
        scripts: Sequence[str] = (),
        durable_replicas: int = 0,
        durable_timeout_ms: int = 1000,
        retry_seconds: float = 10.0,
        socket_timeout: float | None = None,
    ) -> None:
        """Use `cluster` (a RedisCluster with decoded replies, or URLs). `libraries` and
        `scripts` are loaded on every primary beside the engine; `durable_replicas` > 0 sends
        `WAIT` after each write; `retry_seconds` bounds the resends of a command that did
        not run (a failover, a slot move)."""
        if engine not in ("auto", "function", "script"):
            raise InvalidArgument(f"engine must be auto, function or script, got {engine!r}")
        self._rc = build_cluster(cluster, socket_timeout)
        self._owns = not isinstance(cluster, RedisCluster)
        self.mode = engine
        self._libraries = [library_text(caller_time), *libraries]
        texts = [script_text(caller_time), *scripts]
        self._scripts = {sha1(t): t for t in texts}
        self._engine_names = engine_names(caller_time)
        self.durable_replicas = durable_replicas
        self.durable_timeout_ms = durable_timeout_ms
        self.retry_seconds = retry_seconds
        self._nodes = NodeConnections(self._rc, self.refresh)
        self._lock = threading.Lock()
        self._slots: dict[str, int] = {}
        self._owners: dict[int, str] = {}  # slot -> primary, as of the last refresh
        self._stale = False
        self._loaded: set[str] = set()
        #: What happened so far (for tests and metrics): redirects, waits, reloads, resends.
        self.stats = dict.fromkeys(
            ("moved", "ask", "ask_waits", "tryagain", "reloads", "refreshes",
             "not_sent", "resent_reads", "lost_replies"), 0)

    @property
    def engine_names(self) -> frozenset[str]:
        """Return the engine's function names and script sha (for `only_reads`)."""
        return self._engine_names

    @property
    def redis_cluster(self) -> RedisCluster:
        """Return the redis-py cluster client whose slot map and pools this uses."""
        return self._rc

    def close(self) -> None:
        """Drop every thread's connections; close the cluster client if we built it."""
        self._nodes.close()
        if self._owns:
            self._rc.close()

    def disconnect(self) -> None:
        """Close every idle connection to the cluster's nodes; the next call reconnects
        (the slot map is kept)."""
        self._nodes.disconnect()
        for node in self._rc.get_nodes():  # type: ignore[no-untyped-call, unused-ignore]
            conn = node.redis_connection
            if conn is not None:
                conn.connection_pool.disconnect(inuse_connections=False)

    # -- topology ----------------------------------------------------------------------

    def nodes(self) -> list[str]:
        """Return the primaries' names (`host:port`), as the slot map has them."""
        return sorted(n.name for n in self._rc.get_primaries())  # type: ignore[no-untyped-call, unused-ignore]

    def slot_of(self, key: str) -> int:
        """Return the hash slot of `key` (cached: a process uses a few keyspace prefixes)."""
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = int(key_slot(key.encode()))
        return slot

    def primary_for(self, keyspace: str) -> str:
        """Return the name of the primary owning the slot of `keyspace` (a key or prefix)."""
        slot = self.slot_of(keyspace)
        name = self._owners.get(slot)
        if name is None:  # redis-py's lookup takes a lock and a decorator: ~5 µs a call
            name = str(self._rc.nodes_manager.get_node_from_slot(slot).name)
            self._owners[slot] = name
        return name

    def refresh(self) -> None:
        """Read the slot map again (after MOVED, a connection error, a failover)."""
        self.stats["refreshes"] += 1
        self._stale = True
        self._owners = {}
        try:
            self._rc.nodes_manager.initialize()
        except (redis.RedisError, RedisClusterException):
            return  # no node answered: stay stale, the caller backs off and tries again
        self._owners = {}  # lookups made while the map was being read may be old
        self._stale = False
        with self._lock:
            self._loaded &= set(self.nodes())
        if self.mode != "auto":
            self.load_engine()  # primaries found since (an heir, a new node): load them now

    # -- engine loading ----------------------------------------------------------------

    def load_engine(self) -> str:
        """Load the engine (and the extra code) on every primary not loaded yet; return the
        mode (function on Redis 7+/Valkey, script on 6.2 or when FCALL is refused)."""
        for name in self.nodes():
            if name not in self._loaded:
                try:
                    self.load_on(name)
                except (NotSent, ReadOnlyError, *_TRANSPORT_ERRORS):
                    self._stale = True  # down or demoted now: loaded when found, or on demand
        return self.mode

    def load_on(self, name: str) -> None:
        """Load the engine and the extra code on primary `name` (idempotent)."""
        if self.mode != "script":
            for text in self._libraries:
                try:
                    self._send(name, ("FUNCTION", "LOAD", text))
                except redis.ResponseError as exc:
                    lowered = str(exc).lower()
                    if "already exists" in lowered:
                        continue
                    if self.mode == "auto" and ("unknown command" in lowered
                                                or "no permissions" in lowered):
                        self.mode = "script"  # Redis 6.2, or FUNCTION denied by an ACL
                        break
                    raise
            else:
                self.mode = "function"
        for text in self._scripts.values():
            self._send(name, ("SCRIPT", "LOAD", text))
        with self._lock:
            self._loaded.add(name)

    # -- calls -------------------------------------------------------------------------

    def execute(
        self,
        command: Sequence[Any],
        *,
        key: str | None = None,
        node: str | None = None,
        read_only: bool | None = None,
        follow_ask: bool | None = None,
    ) -> Any:
        """Send `command` to the primary owning its declared key (or `key`, or node `node`)
        and return the reply; an error reply is raised as redis-py's ResponseError.

        `read_only` (default: judged from the command) allows a resend after a lost reply;
        `follow_ask` (default: only for commands that are not script calls) allows ASKING.
        """
        if node is None and key is None:
            key = declared_key(command)
            if key is None:
                raise InvalidArgument(f"{command[0]} declares no key: give key= or node=")
        reads = only_reads(command, self._engine_names) if read_only is None else read_only
        follow = (str(command[0]).upper() not in SCRIPT_CALLS) if follow_ask is None \
            else follow_ask
        if self.mode == "auto" or not self._loaded:
            self.load_engine()
        deadline = time.monotonic() + self.retry_seconds
        pause = _BACKOFF_FIRST
        target: str | None = None  # where a redirect says to send next
        asking = reloaded = False
        redirects = 0
        for _ in range(_MAX_SENDS):
            if self._stale:
                self.refresh()
            try:
                name = target or node or self.primary_for(key or "")
                reply = self._send(name, command, asking)
            except (NotSent, RedisClusterException):
                self.stats["not_sent"] += 1
                self._stale = True  # a dead primary or a gap: the next map may name its heir
            except BusyLoadingError:  # a ConnectionError subclass, but nothing ran
                self.stats["tryagain"] += 1
            except _TRANSPORT_ERRORS as exc:
                self._stale = True
                if not reads:
                    self.stats["lost_replies"] += 1
                    raise QlessConnectionError(
                        f"{type(exc).__name__} on {name}: {exc} (the command may have run)"
                    ) from exc
                self.stats["resent_reads"] += 1
            except MovedError as exc:
                self.stats["moved"] += 1
                self._stale = True
                redirects += 1
                if redirects <= _QUICK_REDIRECTS:
                    target, asking = redirect_target(exc), False
                    continue  # at once: the node that owns the slot said so
                # Nodes sending each other's way (views disagree mid-failover): back off.
            except AskError as exc:
                if follow and not asking:
                    self.stats["ask"] += 1
                    target, asking = redirect_target(exc), True
                    continue
                self.stats["ask_waits"] += 1  # half moved: wait for the move to end
            except (TryAgainError, ClusterDownError):
                self.stats["tryagain"] += 1
            except redis.ResponseError as exc:
                missing = isinstance(exc, NoScriptError) or "function not found" in str(
                    exc).lower()
                if reloaded or not missing:
                    raise
                reloaded = True
                if self._reload(name):
                    continue
            else:
                if self.durable_replicas > 0 and not reads:
                    self._wait_replicas(name, reply)
                return reply
            target, asking = None, False
            if time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
            pause = min(pause * 2, _BACKOFF_CAP)
        raise NotRun(f"{command[0]} not run: the cluster did not settle within "
                     f"{self.retry_seconds} s")

    def execute_on_all_primaries(self, command: Sequence[Any], *, read_only: bool = True
                                 ) -> dict[str, Any]:
        """Send `command` to every primary (fan-out reads: SCAN, INFO); return replies by
        primary name."""
        return {name: self.execute(command, node=name, read_only=read_only)
                for name in self.nodes()}

    def _reload(self, name: str) -> bool:
        """Load the code on `name`, which said it has none (a new or flushed primary);
        return False if `name` could not be reached."""
        self.stats["reloads"] += 1
        with self._lock:
            self._loaded.discard(name)
        try:
            self.load_on(name)
        except (NotSent, *_TRANSPORT_ERRORS):
            self._stale = True
            return False
        return True

    def _wait_replicas(self, name: str, reply: Any) -> None:
        """Block until `durable_replicas` replicas of `name` have the write, or raise."""
        want = self.durable_replicas
        try:
            got = int(self._send(name, ("WAIT", want, self.durable_timeout_ms)))
        except _TRANSPORT_ERRORS + (NotSent,) as exc:
            self._stale = True
            raise NotDurable(f"WAIT on {name} failed: {exc}", reply, 0) from exc
        if got < want:
            raise NotDurable(f"{got} of {want} replicas of {name} confirmed the write in "
                             f"{self.durable_timeout_ms} ms", reply, got)

    # -- connections -------------------------------------------------------------------

    def _send(self, name: str, command: Sequence[Any], asking: bool = False) -> Any:
        """Send one command to node `name` on this thread's connection and read the reply."""
        return self._nodes.send(name, command, asking)

    def send_pipeline(self, name: str, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send `commands` to node `name` in one round trip; return the replies, error
        replies as exception instances. NotRun if no connection could be made; a transport
        error after sending is raised as is (the commands may have run)."""
        try:
            conn = self._nodes.connection(name)
        except NotSent as exc:
            self._stale = True
            raise NotRun(f"no connection to {name}: {exc}") from exc
        try:
            conn.send_packed_command([pack_command(tuple(c)) for c in commands])
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except (redis.ResponseError, BusyLoadingError) as exc:
                    replies.append(exc)
            return replies
        except BaseException:
            self._stale = True
            self._nodes.drop(name)
            raise
