"""A pub/sub listener thread for the engine's events, robust to dead connections."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .engine.invoke import DEFAULT
from .engine.pubsub import block_async_signals
from .exceptions import QlessConnectionError
from .serialization import check_worker

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Events", "EVENT_CHANNELS", "LOG_CHANNEL", "Callback", "ListenerThread"]

logger = logging.getLogger("django_qless")

Callback = Callable[[dict[str, Any]], object]

# The JSON log channel, and the jid-only channels (payload is the jid), by name without the
# keyspace prefix; LOG_CHANNEL and EVENT_CHANNELS are the default keyspace's.
EVENT_NAMES = ("log", "canceled", "completed", "failed", "popped", "stalled", "put", "track",
               "untrack")
LOG_CHANNEL = DEFAULT.channel("log")
EVENT_CHANNELS = tuple(DEFAULT.channel(name) for name in EVENT_NAMES)
_TRANSPORT = (redis.ConnectionError, redis.TimeoutError, OSError)
# Pub/sub message kinds: plain and sharded channels.
_MESSAGE = ("message", "smessage")


def decode_event(channel: str, payload: str, prefix: str = DEFAULT.prefix) -> dict[str, Any]:
    """Turn a pub/sub message into an event dict with at least "event" and "channel".

    `prefix` is the keyspace's (`ql:` or `ql:{<tag>}:`): the event name follows it.
    """
    name = channel[len(prefix):] if channel.startswith(prefix) else channel
    if name.startswith("wake:"):
        return {"event": "wake", "queue": payload, "channel": channel}
    if payload.startswith("{"):
        try:
            decoded = json.loads(payload)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            decoded.setdefault("event", name)
            decoded["channel"] = channel
            return decoded
    return {"event": name, "jid": payload, "channel": channel}


class ListenerThread:
    """A listener's background thread and its two flags: `stop` (asked to end) and
    `listening` (every subscription confirmed), shared by Events and ShardEvents."""

    def __init__(self, run: Callable[[], None]) -> None:
        self._run = run
        self.stop_flag = threading.Event()
        self.listening = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, timeout: float) -> bool:
        """Start the thread unless it runs; return whether it subscribed within `timeout`
        (if not, it is stopped)."""
        if self._thread is not None and self._thread.is_alive():
            return True
        self.stop_flag.clear()
        self.listening.clear()
        self._thread = threading.Thread(target=self._run, name="qless-events", daemon=True)
        self._thread.start()
        if not self.listening.wait(timeout):
            self.stop()
            return False
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to end and wait for it up to `timeout` (not from the thread itself)."""
        self.stop_flag.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self.listening.clear()


class Events:
    """Listen to the engine's channels in a thread and call callbacks per event name.

    `start()` returns once Redis confirmed every subscription. The thread sends PING every
    `health_check_interval` seconds and reconnects (with back-off, resubscribing) when the
    PONG does not come back or the connection drops. Messages published while it is
    reconnecting are lost: events are advisory, job state is the authority.
    """

    def __init__(
        self,
        client: Client,
        *,
        worker: str | None = None,
        channels: Iterable[str] | None = None,
        health_check_interval: float = 10.0,
        max_backoff: float = 5.0,
    ) -> None:
        self.client = client
        ks = client.keyspace
        self._prefix = ks.prefix
        chans = [ks.channel(n) for n in EVENT_NAMES] if channels is None else list(channels)
        if worker is not None:
            chans.append(ks.channel(f"w:{check_worker(worker)}"))
        self.channels = tuple(dict.fromkeys(chans))
        # A shard's channels are sharded on Redis 7+ (SSUBSCRIBE), decided when connecting.
        self._sharded: bool | None = None if ks.sharded else False
        self.health_check_interval = health_check_interval
        self.max_backoff = max_backoff
        self._callbacks: dict[str, list[Callback]] = {}
        self._lock = threading.Lock()
        self._life = ListenerThread(self._run)
        self._stop, self._listening = self._life.stop_flag, self._life.listening
        self._conn: Any = None
        self.connects = 0

    # -- callbacks ------------------------------------------------------------------------

    def on(self, event: str, callback: Callback) -> Callback:
        """Call `callback(event_dict)` for `event` ("*" for every event); return it."""
        with self._lock:
            self._callbacks.setdefault(event, []).append(callback)
        return callback

    def off(self, event: str, callback: Callback) -> None:
        """Remove a callback added with `on`."""
        with self._lock:
            callbacks = self._callbacks.get(event, [])
            if callback in callbacks:
                callbacks.remove(callback)

    def dispatch(self, event: dict[str, Any]) -> None:
        """Call the callbacks for one event; a callback that raises is logged and skipped."""
        with self._lock:
            callbacks = [*self._callbacks.get(str(event.get("event")), ()),
                         *self._callbacks.get("*", ())]
        for callback in callbacks:
            try:
                callback(event)
            except Exception:
                logger.exception("qless event callback %r failed on %r", callback, event)

    # -- thread -----------------------------------------------------------------------------

    @property
    def listening(self) -> bool:
        """Return whether the subscriptions are currently confirmed."""
        return self._listening.is_set()

    def start(self, timeout: float = 10.0) -> Events:
        """Start the thread; return once subscribed (QlessConnectionError after `timeout`)."""
        if not self._life.start(timeout):
            raise QlessConnectionError(f"could not subscribe to {self.channels} in {timeout}s")
        return self

    def wait_listening(self, timeout: float | None = None) -> bool:
        """Block until subscribed (again, after a reconnect); return whether it is."""
        return self._listening.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and close its connection."""
        self._life.stop(timeout)

    def __enter__(self) -> Events:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _connect(self) -> Any:
        """Open a dedicated connection (RESP2, no retries) and subscribe."""
        pool = self.client.node_redis().connection_pool  # a shard's primary on a cluster
        # redis-py 8 adds maintenance-notification settings to TCP pools; they need RESP3,
        # and this connection speaks RESP2, so leave them out.
        inherited = {
            key: value
            for key, value in pool.connection_kwargs.items()
            if not key.startswith(("maint_notifications", "maintenance", "oss_cluster_maint"))
        }
        kwargs = {
            **inherited,
            "retry": Retry(NoBackoff(), 0),
            "protocol": 2,
            "health_check_interval": 0,  # we PING ourselves; redis-py's check expects "PONG"
        }
        # Bound every blocking read (handshake included) so a dead peer cannot hang us.
        bound = max(self.health_check_interval * 2, 5.0)
        for key in ("socket_timeout", "socket_connect_timeout"):
            if kwargs.get(key) is None:
                kwargs[key] = bound
        conn = pool.connection_class(**kwargs)
        conn.connect()
        if self._sharded is None:
            self._sharded = self.client.keyspace.uses_sharded_pubsub(self.client.server_major())
        conn.send_command("SSUBSCRIBE" if self._sharded else "SUBSCRIBE", *self.channels)
        pending = set(self.channels)
        deadline = time.monotonic() + max(self.health_check_interval, 5.0)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0 or not conn.can_read(timeout=left):
                raise redis.TimeoutError("no SUBSCRIBE confirmation")
            reply = conn.read_response()
            if reply[0] in ("subscribe", "ssubscribe"):
                pending.discard(reply[1])
            elif reply[0] in _MESSAGE:
                self.dispatch(decode_event(reply[1], reply[2], self._prefix))
        return conn

    def _listen(self, conn: Any) -> None:
        """Read messages until stopped; raise on a dead connection or a missing PONG."""
        interval = self.health_check_interval
        last_seen = time.monotonic()
        ping_sent: float | None = None
        while not self._stop.is_set():
            if conn.can_read(timeout=min(0.25, interval)):
                reply = conn.read_response()
                last_seen = time.monotonic()
                kind = reply[0]
                if kind in _MESSAGE:
                    self.dispatch(decode_event(reply[1], reply[2], self._prefix))
                elif kind == "pong":
                    ping_sent = None
                continue
            now = time.monotonic()
            if ping_sent is not None:
                if now - ping_sent > interval:
                    raise redis.TimeoutError(f"no PONG within {interval}s (half-open socket?)")
            elif now - last_seen >= interval:
                conn.send_command("PING")
                ping_sent = now
        self._drain(conn)

    def _drain(self, conn: Any, grace: float = 0.05, limit: int = 10_000) -> None:
        """On stop, deliver what already arrived (or arrives within `grace` seconds)."""
        for _ in range(limit):
            if not conn.can_read(timeout=grace):
                return
            reply = conn.read_response()
            if reply[0] in _MESSAGE:
                self.dispatch(decode_event(reply[1], reply[2], self._prefix))

    def _run(self) -> None:
        """Connect, listen, and reconnect with back-off until stopped."""
        block_async_signals()
        backoff = 0.05
        while not self._stop.is_set():
            conn = None
            try:
                conn = self._connect()
                self._conn = conn
                self.connects += 1
                self._listening.set()
                backoff = 0.05
                self._listen(conn)
            except _TRANSPORT as exc:
                self._listening.clear()
                if self._stop.is_set():
                    break
                logger.warning("qless events: connection lost (%s); reconnecting in %.2fs",
                               exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            except Exception:
                self._listening.clear()
                logger.exception("qless events: unexpected error; reconnecting")
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            finally:
                self._conn = None
                if conn is not None:
                    conn.disconnect()
        self._listening.clear()
