"""What one engine call is made of, and how it goes out.

The keyspace it works on (`Keyspace`: every key and channel name in core/ is built here), the
server time it carries (`ServerClock`), the FCALL or EVALSHA command naming it (`Invoker`),
and the bytes sent on a connection of the client's one pool (`make_redis`, `send`).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis
from hiredis import pack_command
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError
from redis.retry import Retry

from ..exceptions import InvalidArgument
from .lua import function_name, library_text, script_sha, script_text

__all__ = [
    "DEFAULT", "IDLE_CHECK", "Invoker", "Keyspace", "READ_ONLY_COMMANDS", "ServerClock",
    "ensure_open", "make_redis", "send", "send_checked",
]

# -- the keyspace ----------------------------------------------------------------------

# A shard is a complete qless keyspace whose every key carries one hash tag (one Redis Cluster
# slot); the engine gets its prefix as its one key. The default keyspace passes no key and
# keeps qless-core's layout, so stock clients see nothing different.
_TAG = re.compile(r"[A-Za-z0-9_-]{1,32}")


class Keyspace:
    """Build the key and channel names of one keyspace (immutable)."""

    __slots__ = ("tag", "prefix", "engine_keys")

    def __init__(self, tag: str | None = None) -> None:
        if tag is not None and (not isinstance(tag, str) or not _TAG.fullmatch(tag)):
            raise InvalidArgument(f"keyspace tag must be 1-32 of A-Z a-z 0-9 _ -, got {tag!r}")
        self.tag = tag
        self.prefix = "ql:" if tag is None else f"ql:{{{tag}}}:"
        # The keys of every engine call: none for the default keyspace, else the prefix.
        self.engine_keys: tuple[str, ...] = () if tag is None else (self.prefix,)

    def __repr__(self) -> str:
        return f"Keyspace({self.tag!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Keyspace) and other.tag == self.tag

    def __hash__(self) -> int:
        return hash(self.tag)

    @property
    def sharded(self) -> bool:
        """Tell whether this is a shard (its channels are sharded channels on Redis 7+)."""
        return self.tag is not None

    def key(self, name: str) -> str:
        """Return the key `name` (qless-core's name without `ql:`) of this keyspace."""
        return self.prefix + name

    def channel(self, name: str) -> str:
        """Return the pub/sub channel `name` (without `ql:`) of this keyspace."""
        return self.prefix + name

    def name(self, key: str) -> str:
        """Return `key` without this keyspace's prefix (the inverse of `key`)."""
        if not key.startswith(self.prefix):
            raise InvalidArgument(f"{key!r} is not a key of {self!r}")
        return key[len(self.prefix):]

    def pattern(self, glob: str = "*") -> str:
        """Return a SCAN/PSUBSCRIBE pattern of this keyspace's names matching `glob`.

        The default keyspace's `ql:*` also matches shards' keys on the same server; a shard's
        braces are escaped so they match literally.
        """
        if self.tag is None:
            return self.prefix + glob
        return f"ql:\\{{{self.tag}\\}}:" + glob

    def uses_sharded_pubsub(self, server_major: int) -> bool:
        """Tell whether the engine publishes this keyspace's channels with SPUBLISH.

        It does for a shard on Redis/Valkey 7+; the default keyspace, and any keyspace on an
        older server, publishes plainly. Readers must SSUBSCRIBE to sharded channels.
        """
        return self.sharded and server_major >= 7


DEFAULT = Keyspace()


# -- the server clock -----------------------------------------------------------------

class ServerClock:
    """Return the Redis server's time without a round trip per call.

    The offset between the server clock and the local monotonic clock is measured at
    the midpoint of a `TIME` round trip, at first use and again every `refresh` seconds
    (and after a fork). Using the monotonic clock makes local wall-clock steps and skew
    irrelevant: every process agrees with the one Redis host.
    """

    def __init__(
        self,
        server_time: Callable[[], float],
        *,
        local: Callable[[], float] = time.monotonic,
        refresh: float = 60.0,
    ) -> None:
        self._server_time = server_time
        self._local = local
        self._refresh = refresh
        self._lock = threading.Lock()
        self._offset: float | None = None
        self._measured_at = 0.0
        self._pid = os.getpid()
        self.measurements = 0

    def reset(self) -> None:
        """Forget the offset so the next call measures again."""
        self._offset = None

    @property
    def offset(self) -> float | None:
        """Return server time minus local clock, or None before the first measurement."""
        return self._offset

    def _measure(self) -> float:
        """Read TIME and compute the offset at the midpoint of the round trip."""
        before = self._local()
        server = self._server_time()
        after = self._local()
        offset = server - (before + after) / 2.0
        self._offset = offset
        self._measured_at = after
        self._pid = os.getpid()
        self.measurements += 1
        return offset

    def __call__(self) -> float:
        """Return the current server time in epoch seconds."""
        local = self._local()
        offset = self._offset
        if offset is not None and local - self._measured_at < self._refresh:
            if self._pid == os.getpid():
                return local + offset
        if self._pid != os.getpid():
            # A lock held by another thread at fork time would never be released here.
            self._lock = threading.Lock()
            self._offset = None
        with self._lock:
            offset = self._offset
            if offset is None or self._local() - self._measured_at >= self._refresh:
                try:
                    offset = self._measure()
                except Exception:
                    if offset is None:
                        raise
                    # Keep the last good offset; the caller's own command will report
                    # the outage, and the next call measures again.
        return self._local() + offset


# -- the command ----------------------------------------------------------------------

# Commands that never write: sent to the `_ro` function (flag no-writes), so they still work
# when Redis is at maxmemory, as EVALSHA reads do. Anything else goes to the writing function.
READ_ONLY_COMMANDS = frozenset({
    "get", "multiget", "config.get", "failed", "stats", "length",
    "throttle.get", "throttle.locks", "throttle.pending", "queue.throttle.get", "recur.get",
})


def _fcall_refused(text: str) -> bool:
    """Tell whether an error reply says this server or user cannot FCALL at all."""
    lowered = text.lower()
    return "fcall" in lowered and ("unknown command" in lowered or "no permissions" in lowered)


class Invoker:
    """Build engine commands for one server and recognise "engine not loaded" replies."""

    __slots__ = ("mode", "caller_time", "keys", "bundles", "_sha", "_fn", "_fn_ro", "_shas",
                 "_texts")

    def __init__(
        self, mode: str = "auto", *, caller_time: bool = False, keys: Sequence[str] = ()
    ) -> None:
        if mode not in ("auto", "function", "script"):
            raise InvalidArgument(
                f"engine call mode must be auto, function or script, got {mode!r}"
            )
        self.mode = mode
        self.caller_time = caller_time  # the testing variant (core/engine/lua.py)
        # The keyspace's engine keys: none (default keyspace) or its prefix (`Keyspace`).
        self.keys = tuple(keys)
        self._sha = script_sha(caller_time)
        self._fn = function_name(caller_time)
        self._fn_ro = f"{self._fn}_ro"
        # EVALSHA a per-command script (core/engine/bundles.py) instead of the full one: set
        # by a channel, which loads each before its command's first call (NodeChannel.prepare).
        self.bundles = False
        self._shas: dict[str, str] = {}  # command -> the sha its EVALSHA names
        self._texts: dict[str, str] = {}  # bundle sha -> its text

    @property
    def sha(self) -> str:
        """Return the SHA1 of the script this invoker calls."""
        return self._sha

    def script(self) -> str:
        """Return the script text this invoker calls."""
        return script_text(self.caller_time)

    def library(self) -> str:
        """Return the function library this invoker calls."""
        return library_text(self.caller_time)

    def command(self, argv: Sequence[Any]) -> tuple[Any, ...]:
        """Return the Redis command running the engine with `argv` (command, now, args)."""
        keys = self.keys
        if self.mode == "script":
            sha = self._shas.get(argv[0]) if self.bundles else self._sha
            if sha is None:
                sha = self._bundle(argv[0])
            return ("EVALSHA", sha, len(keys), *keys, *argv)
        name = self._fn_ro if argv[0] in READ_ONLY_COMMANDS else self._fn
        return ("FCALL", name, len(keys), *keys, *argv)

    def _bundle(self, command: Any) -> str:
        """Return the sha to EVALSHA for `command`: its bundle's, else the full script's."""
        sha = text = None
        if isinstance(command, str):
            # (loaded here: once per command, and only by a client that EVALSHAs bundles)
            from .bundles import bundle_sha, bundle_text

            sha = bundle_sha(command, self.caller_time)
            text = bundle_text(command, self.caller_time)
        if sha is None or text is None:
            sha = self._sha
        else:
            self._texts[sha] = text
        if len(self._shas) < 256:  # (command names are few; a caller's typos are not kept)
            self._shas[command] = sha
        return sha

    def script_of(self, sent: Sequence[Any]) -> str:
        """Return the text of the script that the EVALSHA command `sent` names."""
        return self._texts.get(sent[1], "") or self.script()

    @staticmethod
    def missing(exc: redis.ResponseError, sent: Sequence[Any]) -> bool:
        """Tell whether `exc`, the reply to command `sent`, means the engine was not there
        (so nothing ran). Judged by what was sent, not the current mode: another thread may
        have switched modes while this call was in flight."""
        if isinstance(exc, NoScriptError):
            return True
        if sent[0] != "FCALL":
            return False
        text = str(exc)
        return text.startswith("Function not found") or _fcall_refused(text)

    def falls_back(self, exc: redis.ResponseError) -> bool:
        """Tell whether `exc` (to FCALL or FUNCTION LOAD) means: use EVALSHA from now on."""
        text = str(exc).lower()
        return self.mode == "auto" and (
            _fcall_refused(text) or "no permissions" in text or "unknown command" in text
        )


# -- the connection -------------------------------------------------------------------

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
