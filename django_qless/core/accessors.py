"""`client.queues`, `client.config`, `client.workers`, `client.tags`: a Client's accessors."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .exceptions import InvalidArgument
from .queue import Queue, with_throttled
from .serialization import (
    as_list,
    check_int,
    check_jid,
    check_name,
    check_number,
    check_text,
    check_worker,
    num,
)

if TYPE_CHECKING:
    from .client import Client
    from .throttle import ThrottleInfo

__all__ = ["BEAT_STATES", "REQUESTS", "BeatReply", "Config", "Queues", "Workers", "Tags"]

BEAT_STATES = ("start", "live", "draining")  # what a worker's beat reports
REQUESTS = ("quiet", "stop")  # what an operator may ask of a worker


class BeatReply(NamedTuple):
    """What a worker's beat brings back."""

    reaped: list[str]  # jids whose expired lease the beat's reap handled
    request: str  # "quiet", "stop" or "": asked from the console since the last beat
    members_lost: bool  # the members were sent as unchanged, but the engine lost them


class Queues:
    """`client.queues`: queue objects by name, and the list of known queues."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    def __getitem__(self, name: str) -> Queue:
        return Queue(self._client, name)

    @property
    def counts(self) -> list[dict[str, Any]]:
        """Return the counts of every known queue."""
        return [with_throttled(item) for item in as_list(self._client.call_json("queues"))]

    def names(self) -> list[str]:
        """Return the names of known queues, oldest first."""
        key = self._client.keyspace.key("queues")
        names = self._client.read(lambda r: r.zrange(key, 0, -1))
        return [str(name) for name in names]

    def stats_many(
        self, names: Iterable[str], date: float | None = None
    ) -> dict[str, dict[str, Any]]:
        """Return several queues' statistics for the day of `date` in one round trip."""
        wanted = [check_name("queue", name) for name in names]
        if not wanted:
            return {}
        when = self._client.now() if date is None else check_number("date", date, 0)
        replies = self._client.pipeline_calls([("stats", (name, num(when))) for name in wanted])
        return {name: (json.loads(reply) if reply else {})
                for name, reply in zip(wanted, replies, strict=True)}

    def throttles(self, names: Iterable[str] | None = None) -> dict[str, ThrottleInfo]:
        """Return queues' own throttles (every known queue by default) in one round trip."""
        wanted = self.names() if names is None else [check_name("queue", n) for n in names]
        infos = self._client.throttles.get_many(self[name].throttle.id for name in wanted)
        return dict(zip(wanted, infos, strict=True))


def _decode(value: Any) -> Any:
    """Return numbers as numbers (the engine stores every option as a string)."""
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        return decoded if isinstance(decoded, (int, float)) else value
    return value


class Config(MutableMapping[str, Any]):
    """Read and write engine options; unset options fall back to the engine's defaults."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def __getitem__(self, key: str) -> Any:
        value = self._client.call("config.get", check_text("config key", key, 256))
        if value is None:
            raise KeyError(key)
        return _decode(value)

    def __setitem__(self, key: str, value: Any) -> None:
        from .engine_config import check_config  # (the bounds tables: loaded by a write only)

        self._client.call("config.set", key, check_config(key, value))

    def __delitem__(self, key: str) -> None:
        self._client.call("config.unset", check_text("config key", key, 256))

    @property
    def all(self) -> dict[str, Any]:
        """Return every option: the defaults overlaid with the stored values."""
        reply = self._client.call_json("config.get") or {}
        return {key: _decode(value) for key, value in reply.items()}

    def __iter__(self) -> Iterator[str]:
        return iter(self.all)

    def __len__(self) -> int:
        return len(self.all)

    def __repr__(self) -> str:
        return f"<Config {self.all!r}>"


class Workers:
    """`client.workers`: worker names seen by the engine and the jobs they hold."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    @property
    def counts(self) -> list[dict[str, Any]]:
        """Return [{"name", "jobs", "stalled"}], most recently seen first."""
        return as_list(self._client.call_json("workers"))

    def __getitem__(self, name: str) -> dict[str, list[str]]:
        reply = self._client.call_json("workers", check_worker(name)) or {}
        return {"jobs": as_list(reply.get("jobs")), "stalled": as_list(reply.get("stalled"))}

    def hello(self, name: str, host: str, pid: int, queues: list[str], *,
              beat: float = 60.0, group: str = "") -> None:
        """Record a starting worker's host, pid and queues (resets its done/failed counts);
        it promises a contact every `beat` seconds, by its own calls or its `group`'s beats."""
        self._client.call("worker.hello", check_worker(name), host, check_int("pid", pid, 0),
                          json.dumps(list(queues)), check_number("beat", beat, 0.001, 86400),
                          check_worker(group) if group else "")

    def beat(self, group: str, state: str = "live", *, members: Sequence[str] | None = (),
             reap: bool = False, queues: Sequence[str] | None = None) -> BeatReply:
        """Say `group` and its `members` (a supervisor's live children; None: those of the
        last beat, unchanged) are alive (`state`: start, live or draining); with `reap`, also
        re-offer expired leases in `queues` (all known queues if None) as `reap` does.

        Returns the jids reaped, a request an operator left for the group since the last
        beat ('quiet', 'stop' or ''), and whether members must be sent again.
        """
        if state not in BEAT_STATES:
            raise InvalidArgument(f"state must be one of {', '.join(BEAT_STATES)}: {state!r}")
        names = [check_name("queue", q) for q in queues or ()]
        alive = ":" if members is None else " ".join(check_worker(m) for m in members)
        reply = self._client.call_json("worker.beat", check_worker(group), state, alive,
                                       "1" if reap else "0", *names)
        if not isinstance(reply, dict):
            reply = {}
        return BeatReply([str(jid) for jid in as_list(reply.get("reaped"))],
                         str(reply.get("request") or ""), bool(reply.get("members_lost")))

    def request(self, name: str, action: str) -> None:
        """Ask a live worker to be quiet (finish its jobs, take no new ones, then exit) or to
        stop (as TERM does); raises InvalidArgument for an unknown or dead worker."""
        if action not in REQUESTS:
            raise InvalidArgument(f"action must be quiet or stop: {action!r}")
        self._client.call("worker.request", check_worker(name), action)

    def info(self, *names: str) -> list[dict[str, Any]]:
        """Return [{"name", "last_seen", "host", "pid", "queues", "started", "done", "failed",
        "beat", "state", "request"}].

        Without names: every worker the engine knows (at most 1000), most recently seen
        first. Fields a worker never reported (a stock qless worker) are None; counts are 0.
        `state` is live, draining, stale (unseen for 1.5 beats) or dead (3 beats); `request` the
        operator's pending quiet or stop ('' when none).
        """
        reply = as_list(self._client.call_json("worker.info", *(check_worker(n) for n in names)))
        return [_info_row(row) for row in reply if isinstance(row, dict)]

    def deregister(self, *names: str) -> None:
        """Forget workers (their job sets stay until the locks expire)."""
        if names:
            self._client.call("worker.deregister", *(check_worker(n) for n in names))

    def release(self, jid: str, worker: str) -> None:
        """Put job `jid`, held by `worker`, back to waiting without spending a retry; raises
        LostLockError (or JobNotFound) when `worker` no longer holds it."""
        self._client.call("release", check_jid(jid), check_worker(worker))

    def hold_jobs(self, names: Iterable[str]) -> bool:
        """Tell whether any of the workers `names` holds a job here."""
        keys = [self._client.keyspace.key(f"w:{check_worker(n)}:jobs") for n in names]

        def read(conn: Any) -> list[Any]:
            pipe = conn.pipeline(transaction=False)
            for key in keys:
                pipe.zcard(key)
            return list(pipe.execute())

        return bool(keys) and any(int(n) for n in self._client.read(read))

    def still_hold(self, attempts: Sequence[tuple[str, str, str]]) -> list[bool]:
        """Tell, for each (jid, worker, attempt token), whether that worker's attempt still
        holds the job or is the one that settled it."""
        keyspace = self._client.keyspace

        def read(conn: Any) -> list[Any]:
            pipe = conn.pipeline(transaction=False)
            for jid, _, _ in attempts:
                pipe.hmget(keyspace.key(f"j:{jid}"), ["state", "worker", "done"])
            return list(pipe.execute())

        rows = self._client.read(read) if attempts else []
        held = []
        for (_, worker, token), (state, holder, done) in zip(attempts, rows, strict=True):
            settled = bool(token) and str(done or "").startswith(f"{token} ")
            held.append((state == "running" and holder == worker) or settled)
        return held


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _info_row(row: dict[str, Any]) -> dict[str, Any]:
    """Normalise one `worker.info` entry (missing or malformed fields become None)."""
    try:
        queues = json.loads(row.get("queues") or "[]")
    except ValueError:
        queues = []
    pid = _number(row.get("pid"))
    return {
        "name": str(row.get("name", "")),
        "last_seen": _number(row.get("last_seen")),
        "host": str(row["host"]) if row.get("host") else None,
        "pid": int(pid) if pid is not None else None,
        "queues": [str(q) for q in queues] if isinstance(queues, list) else [],
        "started": _number(row.get("started")),
        "done": int(_number(row.get("done")) or 0),
        "failed": int(_number(row.get("failed")) or 0),
        "beat": _number(row.get("beat")),
        "state": str(row.get("state") or "live"),
        "request": str(row.get("request") or ""),
    }


class Tags:
    """`client.tags`: tag statistics."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    def top(self, offset: int = 0, count: int = 25) -> list[str]:
        """Return tags used by at least two jobs, most used first."""
        return as_list(self._client.call_json(
            "tag", "top", check_int("offset", offset, 0), check_int("count", count, 0, 500)
        ))
