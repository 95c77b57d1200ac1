"""The client: one connection pool, the script call path, the server clock, the accessors."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import redis
from redis import Redis
from redis.exceptions import ResponseError

from .accessors import Tags, Workers
from .clock import ServerClock
from .deferred import SideConnection
from .engine_config import Config
from .exceptions import InvalidArgument, QlessConnectionError, QlessError, error_from_reply
from .hotpath import WorkerCalls
from .invoke import READ_ONLY_COMMANDS, Invoker
from .jobs import Jobs
from .keyspace import Keyspace
from .pool import make_redis, send, send_checked
from .queues import Queues
from .serialization import (
    check_jid,
    check_worker,
    dumps,
    num,
)
from .throttle import Throttles

if TYPE_CHECKING:
    from .events import Events

__all__ = ["Client"]

T = TypeVar("T")
_TRANSPORT_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)
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


def _connection_error(exc: BaseException) -> QlessConnectionError:
    """Wrap a transport error (the script may or may not have run)."""
    return QlessConnectionError(f"{type(exc).__name__}: {exc}")


class Client(WorkerCalls):
    """A connection to one Redis database holding qless data."""

    def __init__(
        self,
        url_or_redis: str | redis.Redis = "redis://localhost:6379/0",
        *,
        worker_name: str | None = None,
        socket_timeout: float | None = None,
        engine: str | None = None,
        keyspace: str | None = None,
        _clock: Callable[[], float] | None = None,
    ) -> None:
        """Connect to `url_or_redis`; `keyspace` names a shard's tag (None: the default `ql:`
        keyspace). `_clock` is a testing hook, not API: the client sends its time to an engine
        variant that takes it as given (docs/engine.md, "Server clock")."""
        self._redis = make_redis(url_or_redis, socket_timeout)
        self._owns_pool = self._redis is not url_or_redis
        self._worker_name = None if worker_name is None else check_worker(worker_name)
        self._default_name = ""
        self._name_pid = -1
        self.server_clock = ServerClock(self.server_time)
        self._clock: Callable[[], float] = _clock if _clock is not None else self.server_clock
        self._script_loaded = False
        self._pinned: tuple[int, int, Any] | None = None
        self._pinned_used = 0.0  # when the pinned connection last sent (monotonic)
        self._side: SideConnection | None = None
        self._checked_queues: dict[tuple[str, ...], tuple[str, ...]] = {}
        # auto: FCALL our function library (Redis 7+), EVALSHA where FCALL is unknown or denied.
        self.keyspace = Keyspace(keyspace)
        self._engine = Invoker(engine or os.environ.get("QLESS_ENGINE_CALL", "auto"),
                               caller_time=_clock is not None, keys=self.keyspace.engine_keys)
        self.queues = Queues(self)
        self.jobs = Jobs(self)
        self.workers = Workers(self)
        self.config = Config(self)
        self.throttles = Throttles(self)
        self.tags = Tags(self)

    def __repr__(self) -> str:
        return f"<Client {self._redis.connection_pool!r}>"

    @property
    def redis(self) -> redis.Redis:
        """Return the redis-py client (decoded strings; commands are not retried)."""
        return self._redis

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
        """Close the pool's connections (a pool passed in by the caller only if `shared`)."""
        self._unpin()
        if self._owns_pool or shared:
            self._redis.close()
            self._redis.connection_pool.disconnect()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plain reads (idempotent, so one retry on a transport error is safe) ----------------

    def read(self, fn: Callable[[Redis], T], attempts: int = 3) -> T:
        """Run an idempotent read, retrying transport errors; wrap the last one."""
        for attempt in range(attempts):
            try:
                return fn(self._redis)
            except _TRANSPORT_ERRORS as exc:
                if attempt == attempts - 1:
                    raise _connection_error(exc) from exc
        raise AssertionError("unreachable")

    def server_major(self) -> int:
        """Return the server's major version (Valkey reports its Redis-compatible one)."""
        info = self.read(lambda r: r.info("server"))
        return int(str(info.get("redis_version", "0")).split(".")[0])

    def server_time(self) -> float:
        """Return Redis `TIME` in epoch seconds."""
        seconds, micros = self.read(lambda r: r.time())
        return int(seconds) + int(micros) / 1e6

    # -- script calls (never retried: a re-sent pop hands out jobs nobody works) ------------

    def _execute(self, args: Sequence[Any]) -> Any:
        """Send one command without any retry.

        The first thread to call keeps one pooled connection for itself (redis-py's pool
        get/release costs ~5 µs a call, as much as the engine's own work on a cheap command);
        other threads, and every call after a transport error, go through the pool. The kept
        connection is checked before use when it sat idle, as the pool checks the ones it
        hands out, so the first call after a Redis restart does not fail on a dead socket.
        """
        pinned = self._pinned
        if pinned is not None and pinned[1] != os.getpid():
            pinned = self._pinned = None  # inherited across fork: the pool starts afresh
        if pinned is not None:
            owner, _, conn = pinned
            if owner != threading.get_ident():
                return self._execute_pooled(args)
        else:
            conn = self._redis.connection_pool.get_connection()
            self._pinned = (threading.get_ident(), os.getpid(), conn)
        try:
            self._pinned_used = send_checked(conn, args, self._pinned_used)
            return conn.read_response()
        except redis.ResponseError:
            raise  # an error reply: the connection is fine
        except BaseException:
            self._unpin()
            raise

    def _execute_pooled(self, args: Sequence[Any]) -> Any:
        """Send one command on a connection taken from the pool for this call."""
        pool = self._redis.connection_pool
        conn: Any = pool.get_connection()
        try:
            send(conn, args)
            return conn.read_response()
        finally:
            pool.release(conn)

    def _side_connection(self) -> tuple[int, SideConnection]:
        """Return this process's id and the connection kept for deferred calls."""
        side = self._side
        if side is None:
            side = self._side = SideConnection(self._redis.connection_pool)
        return os.getpid(), side

    def _unpin(self) -> None:
        """Give the pinned connection back (disconnected); the next call pins a fresh one."""
        pinned, self._pinned = self._pinned, None
        if pinned is not None and pinned[1] == os.getpid():
            pinned[2].disconnect()
            self._redis.connection_pool.release(pinned[2])

    def _execute_many(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send commands in one round trip; error replies are returned, not raised."""
        pool = self._redis.connection_pool
        conn: Any = pool.get_connection()
        try:
            conn.send_packed_command(conn.pack_commands(commands))
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
            return replies
        finally:
            pool.release(conn)

    def load_script(self) -> str:
        """Load the engine into the server's script cache; return its sha."""
        try:
            sha = str(self._execute(("SCRIPT", "LOAD", self._engine.script())))
        except redis.ResponseError as exc:
            raise error_from_reply(exc) from exc
        except _TRANSPORT_ERRORS as exc:
            # SCRIPT LOAD is idempotent, so one retry is safe.
            try:
                sha = str(self._execute(("SCRIPT", "LOAD", self._engine.script())))
            except _TRANSPORT_ERRORS as again:
                raise _connection_error(again) from exc
        if sha != self._engine.sha:
            raise QlessError(
                f"server computed sha {sha} for the script, expected {self._engine.sha}"
            )
        self._script_loaded = True
        return sha

    @property
    def engine_mode(self) -> str:
        """Return how the engine is called: function (FCALL), script (EVALSHA) or auto."""
        return self._engine.mode

    def load_engine(self) -> None:
        """Load the engine the way this client calls it (function library or script)."""
        engine = self._engine
        if engine.mode == "script":
            self.load_script()
            return
        try:
            self._execute(("FUNCTION", "LOAD", self._engine.library()))
        except redis.ResponseError as exc:
            if "already exists" in str(exc):
                pass  # another client loaded this same version first
            elif engine.falls_back(exc):
                engine.mode = "script"
                self.load_script()
                return
            else:
                raise error_from_reply(exc) from exc
        except _TRANSPORT_ERRORS as exc:
            raise _connection_error(exc) from exc
        engine.mode = "function"

    def _recover(self, exc: ResponseError) -> None:
        """Make the engine callable after a reply saying it was missing (nothing ran)."""
        if self._engine.falls_back(exc):
            self._engine.mode = "script"
        self.load_engine()

    def _invoke(self, argv: Sequence[str]) -> Any:
        """Call the engine; if it is not loaded, load it and call again (it did not run)."""
        engine = self._engine
        try:
            command = engine.command(argv)
            try:
                return self._execute(command)
            except redis.ResponseError as exc:
                if not engine.missing(exc, command):
                    raise
                self._recover(exc)
            command = engine.command(argv)
            try:
                return self._execute(command)
            except redis.ResponseError as exc:
                if not engine.missing(exc, command):
                    raise
                # Flushed again between our load and the call (a flush storm): EVAL sends
                # the text itself, so it cannot miss. Safe: a missing engine means nothing ran.
                return self._execute(("EVAL", engine.script(), 0, *argv))
        except redis.ResponseError as exc:
            raise error_from_reply(exc) from exc
        except _TRANSPORT_ERRORS as exc:
            raise _connection_error(exc) from exc
        except UnicodeEncodeError as exc:
            # Raised while packing, before anything was sent.
            raise InvalidArgument(f"argument is not valid UTF-8 text: {exc.reason}") from None

    def call(self, command: str, *args: Any) -> Any:
        """Run an engine command with the current time; return the raw reply.

        A command that only reads is sent once more after a transport error: it changed
        nothing, whether or not it ran.
        """
        argv = (command, repr(self.now()), *map(_arg, args))
        if command in READ_ONLY_COMMANDS:
            return self._invoke_twice(argv)
        return self._invoke(argv)

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
        again (the others had executed).
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
        engine = self._engine
        if engine.mode == "auto" or (engine.mode == "script" and not self._script_loaded):
            self.load_engine()
        now = self.now()
        argvs = [
            (command, repr(now + index * _STAGGER), *args)
            for index, (command, args) in enumerate(encoded)
        ]
        results: list[Any] = [None] * len(argvs)
        pending = list(range(len(argvs)))
        for attempt in range(2):
            try:
                sent = [engine.command(argvs[i]) for i in pending]
                replies = self._execute_many(sent)
            except _TRANSPORT_ERRORS as exc:
                raise _connection_error(exc) from exc
            missing = []
            first_missing: ResponseError | None = None
            for index, command, reply in zip(pending, sent, replies, strict=True):
                failed = isinstance(reply, redis.ResponseError)
                if attempt == 0 and failed and engine.missing(reply, command):
                    missing.append(index)
                    first_missing = first_missing or reply
                elif isinstance(reply, redis.ResponseError):
                    results[index] = error_from_reply(reply)
                else:
                    results[index] = reply
            if first_missing is None:
                break
            self._recover(first_missing)
            pending = missing
        if raise_on_error:
            for result in results:
                if isinstance(result, QlessError):
                    raise result
        return results

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
