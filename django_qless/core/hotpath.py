"""The worker's hot path: reserve, complete-and-reserve, reap, and their flat replies.

Held by a `Client` (its `reserve`, `complete_and_reserve`, ... delegate here). The engine
answers these calls with a Redis array instead of JSON (objects.lua, `Q.flat_reply`): a
header, then per job its 13 stored texts joined by U+001F (an array of them when one holds
that character). `decode_worker_reply` turns one into the job objects `get` would report
for the same jobs, without history and dependency lists (docs/engine.md, "The worker's
replies").
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from .exceptions import InvalidArgument, QlessConnectionError, QlessError, error_from_reply
from .job import Job
from .serialization import as_list, check_int, check_name, check_number, check_worker, num

if TYPE_CHECKING:
    from .client import Client
    from .engine.deferred import DeferredCall

__all__ = ["EARLIER_MAX", "REPLY_SHAPE", "RESERVE_QUEUES_MAX", "WorkerCalls", "decode_worker_reply"]

# Queues one reserve may name (the engine refuses more).
RESERVE_QUEUES_MAX = 100
# Completions one complete.reserve may carry before its own (the engine's Q.EARLIER_MAX).
EARLIER_MAX = 16
# Separates the per-job results in the state of a paired complete.reserve reply.
_RS = "\x1e"

# The engine's reply when it holds no list under the id sent (pop.lua, Q.queue_list).
_NOT_HELD = "is not held: send it with its queues"
# Misses in a row after which a client stops naming lists by id (an engine that keeps
# nothing across calls, e.g. a script-only proxy in front of Redis 7).
_MISSES_MAX = 3

T = TypeVar("T")


def list_id(names: Sequence[str]) -> str:
    """Return the id the engine holds a queue list under: a hash of the names, in order."""
    digest = hashlib.blake2b("\n".join(names).encode(), digest_size=12).hexdigest()
    return f"@{digest}"


class WorkerCalls:
    """reserve / complete_and_reserve / reap for one client."""

    __slots__ = ("_client", "_checked_queues", "_ids", "_held", "_misses")

    def __init__(self, client: Client) -> None:
        self._client = client
        self._checked_queues: dict[tuple[str, ...], tuple[str, ...]] = {}
        # checked list -> list_id(list), or None when sent once
        self._ids: dict[tuple[str, ...], str | None] = {}
        # Ids of the lists this client sent with their names (the engine holds them, unless
        # it restarted, reloaded, failed over or keeps nothing across calls: then it says so).
        self._held: dict[str, tuple[str, ...]] = {}
        self._misses = 0  # list misses in a row

    def _checked(self, queues: Sequence[str]) -> tuple[str, ...]:
        """Validate a reserve's queue list (each distinct list once)."""
        if isinstance(queues, str):
            queues = [queues]
        key = tuple(queues)
        try:
            names = self._checked_queues.get(key)
        except TypeError:  # an unhashable entry: check_name below refuses it
            names = None
        if names is None:
            # A worker sends the same list on every call: check it once.
            names = tuple(check_name("queue", q) for q in key)
            if not 1 <= len(names) <= RESERVE_QUEUES_MAX:
                raise InvalidArgument(
                    f"queues must name 1 to {RESERVE_QUEUES_MAX} queues, got {len(names)}")
            if len(self._checked_queues) < 64:
                self._checked_queues[key] = names  # hashable: every entry is a valid name
        return names

    def _queue_args(self, names: tuple[str, ...]) -> list[str]:
        """Encode a queue list: by id once the engine holds it, else with its names.

        Only where the engine keeps state across calls (a Redis 7 function); under EVALSHA
        every call would miss.
        """
        if len(names) < 2 or self._misses >= _MISSES_MAX or self._client.channel.mode == "script":
            return list(names)
        ident = self._ids.get(names)
        if ident is None:
            # The first time as names only: a list that changes on every call (the shuffled
            # reserver) is never hashed nor held; the second time with an id.
            if names not in self._ids:
                if len(self._ids) >= 64:
                    self._ids.clear()
                self._ids[names] = None
                return list(names)
            ident = self._ids[names] = list_id(names)
        if ident in self._held:
            return [ident]
        if len(self._held) >= 256:
            self._held.clear()
        self._held[ident] = names
        return [ident, *names]

    def _missed(self, exc: QlessError, args: Sequence[str]) -> list[str]:
        """Return `args` with the list's names after a list miss (else raise `exc`)."""
        ident = args[-1] if args else ""
        names = self._held.get(ident)
        if names is None or not ident.startswith("@") or _NOT_HELD not in str(exc):
            raise exc
        self._misses += 1
        return [*args, *names]

    def _call_list(self, call: Callable[[list[str]], T], args: list[str]) -> T:
        """Run `call(args)`; after a list miss, once more with the list's names."""
        try:
            result = call(args)
        except QlessError as exc:
            return call(self._missed(exc, args))
        if self._misses and len(args[-1]) > 1 and args[-1].startswith("@"):
            self._misses = 0  # a hit
        return result

    def _reserve_args(self, queues: Sequence[str], count: int) -> list[str]:
        """Validate and encode the queue list and count of reserve/complete.reserve."""
        names = self._checked(queues)
        # (complete.reserve with count 0 reads no list)
        return [str(count), *(self._queue_args(names) if count else names)]

    def _jobs_and_wake(self, reply: dict[str, Any], worker: str) -> tuple[list[Job], float | None]:
        """Build Jobs from a decoded reserve reply; wake is None if jobs came or nothing is due."""
        jobs = [Job(self._client, d, owner=worker) for d in reply["jobs"]]
        wake = reply.get("wake")
        return jobs, (None if wake is None or wake < 0 else float(wake))

    def reserve(
        self, queues: Sequence[str], count: int = 1, worker: str | None = None,
        holding: Collection[str] = (), wait: float | None = None,
    ) -> tuple[list[Job], float | None]:
        """Pop up to `count` jobs from `queues` in order; also return seconds until due work.

        With `wait` (seconds), when nothing is ready the worker stays registered as idle that
        long: the next job ready in these queues is popped for it and published on
        `ql:hand:<worker>` (engine `reserve.wait`; the worker must listen there).
        After a lost reply, returns the jobs that call reserved (held by the worker, minus
        the jids in `holding`, the ones the caller is still working on) rather than more.
        """
        client = self._client
        name = client.worker_name if worker is None else check_worker(worker)
        args = self._reserve_args(queues, check_int("count", count, 1, 1000))
        command = "reserve"
        if wait is not None:
            if not 0 < check_number("wait", wait, 0, 3600):
                raise InvalidArgument(f"wait must be > 0, got {wait!r}")
            command = "reserve.wait"
            args = [num(wait), *args]

        def call(argv: list[str]) -> Any:
            return decode_worker_reply(client.call(command, name, *argv))

        try:
            reply = self._call_list(call, args)
        except QlessConnectionError:
            # The lost call may have run and handed `name` jobs it never heard of: take those
            # (running for `name`, not in `holding`) instead of popping more. None held: the
            # call popped nothing, so reserving again is safe. A second error is raised.
            orphans = [j for j in client.workers[name]["jobs"] if j not in holding]
            if not orphans:
                reply = self._call_list(call, args)
                return self._jobs_and_wake(reply, name)
            found = as_list(client.call_json("multiget", *orphans[:count]))
            return [Job(client, d, owner=name) for d in found if d.get("worker") == name], None
        return self._jobs_and_wake(reply, name)

    def handed_jobs(self, messages: Sequence[dict[str, Any]], worker: str) -> list[Job]:
        """Build the Jobs the engine handed `worker` (decoded `ql:hand:<worker>` messages)."""
        return [Job(self._client, d, owner=worker) for d in messages if d.get("worker") == worker]

    def complete_and_reserve(
        self, job: Job, queues: Sequence[str], count: int = 1
    ) -> tuple[str, list[Job], float | None]:
        """Complete `job` and reserve the next jobs in one round trip."""
        args = self._complete_reserve_args(job, queues, count)
        client = self._client
        raw = self._call_list(lambda argv: client.call_replayable("complete.reserve", *argv), args)
        return self._completed(job, raw)

    def send_complete_and_reserve(
        self, job: Job, queues: Sequence[str], count: int = 1
    ) -> DeferredCall[tuple[str, list[Job], float | None]]:
        """Send `complete_and_reserve` now; its `result()` reads the reply later, once.

        Lets a worker run a job it already holds while Redis completes the previous one.
        """
        args = self._complete_reserve_args(job, queues, count)
        return self._defer(args, lambda raw: self._completed(job, raw))

    def complete_many_and_reserve(
        self, jobs: Sequence[Job], queues: Sequence[str], count: int = 1
    ) -> tuple[list[str | QlessError], list[Job], float | None]:
        """Complete `jobs` (all held by one worker) and reserve the next in one round trip.

        Returns each job's result in order: its new state, or the error that refused it
        (a job whose lock was lost meanwhile; the others are completed all the same). A bad
        argument refuses the whole call: raised, and nothing was written.
        """
        args = self._complete_many_args(jobs, queues, count)
        client = self._client
        raw = self._call_list(lambda argv: client.call_replayable("complete.reserve", *argv), args)
        return self._completed_many(jobs, raw)

    def send_complete_many(
        self, jobs: Sequence[Job], queues: Sequence[str], count: int = 1
    ) -> DeferredCall[tuple[list[str | QlessError], list[Job], float | None]]:
        """Send `complete_many_and_reserve` now; its `result()` reads the reply later, once."""
        args = self._complete_many_args(jobs, queues, count)
        return self._defer(args, lambda raw: self._completed_many(jobs, raw))

    def _defer(self, args: list[str], parse: Callable[[Any], T]) -> DeferredCall[T]:
        """Send `complete.reserve` with `args` now; read and `parse` its reply later."""
        from .engine.deferred import DeferredCall  # (loaded by the first job sent ahead)

        client = self._client
        pending = client.channel.defer(("complete.reserve", repr(client.now()), *args))

        def read() -> Any:
            try:
                return pending.reply()
            except QlessError as exc:
                # (a list held by id that the engine lost: refused before any write, sent again)
                return client.call_replayable("complete.reserve", *self._missed(exc, args))

        return DeferredCall(read, parse)

    def _complete_many_args(
        self, jobs: Sequence[Job], queues: Sequence[str], count: int
    ) -> list[str]:
        """Encode complete.reserve's paired form: `+N`, the N earlier completions, the last."""
        if not 1 <= len(jobs) <= EARLIER_MAX + 1:
            raise InvalidArgument(f"complete 1 to {EARLIER_MAX + 1} jobs at once, got {len(jobs)}")
        *earlier, last = jobs
        args = self._complete_reserve_args(last, queues, count)
        if not earlier:
            return args
        worker = args[1]
        head = [f"+{len(earlier)}"]
        for job in earlier:
            if job._worker_arg() != worker:
                raise InvalidArgument(f"job {job.jid} is held by another worker than {worker}")
            head += [job.jid, job.queue_name, job._data_text(), job.attempt_token]
        return [*head, *args]

    def _completed_many(
        self, jobs: Sequence[Job], raw: Any
    ) -> tuple[list[str | QlessError], list[Job], float | None]:
        """Decode a paired `complete.reserve` reply; the completed jobs are no longer ours."""
        reply = decode_worker_reply(raw)
        texts = str(reply.get("state", "complete")).split(_RS)
        if len(texts) != len(jobs):
            raise QlessError(f"complete.reserve answered {len(texts)} results for {len(jobs)} jobs")
        results: list[str | QlessError] = []
        for job, text in zip(jobs, texts, strict=True):
            if text.startswith("!"):
                results.append(error_from_reply(redis.ResponseError(text[1:])))
            else:
                job._released(text, job.queue_name)
                results.append(text)
        more, wake = self._jobs_and_wake(reply, jobs[-1]._worker_arg())
        return results, more, wake

    def _complete_reserve_args(self, job: Job, queues: Sequence[str], count: int) -> list[str]:
        """Validate and encode the arguments of `complete.reserve` after the time."""
        return [job.jid, job._worker_arg(), job.queue_name, job._data_text(), job.attempt_token,
                *self._reserve_args(queues, check_int("count", count, 0, 1000))]

    def _completed(self, job: Job, raw: Any) -> tuple[str, list[Job], float | None]:
        """Decode a `complete.reserve` reply and mark `job` as no longer ours."""
        reply = decode_worker_reply(raw)
        worker = job._worker_arg()
        state = str(reply.get("state", "complete"))
        job._released(state, job.queue_name)
        jobs, wake = self._jobs_and_wake(reply, worker)
        return state, jobs, wake

    def reap(self, queues: Sequence[str] | None = None) -> list[str]:
        """Re-offer jobs whose lease expired in `queues` (all known queues if None).

        Does for idle queues what the next pop would: a courtesy notice first, then, after the
        grace period, the job goes back to waiting (a retry spent) or fails when none remain.
        Returns the jids moved to waiting or failed (at most 100 per queue per call).
        """
        if isinstance(queues, str):
            queues = [queues]
        names = [] if queues is None else [check_name("queue", q) for q in queues]
        return [str(jid) for jid in self._client.call_json("reap", *names)]


# -- the flat replies -------------------------------------------------------------------

# The header's first entry (objects.lua's Q.REPLY_SHAPE): the layout below.
REPLY_SHAPE = "qless-flat-2"
_HEADER = 4  # shape, state of the completed job, wake, worker
_FIELDS = 13  # per job, in objects.lua's Q.job_fields order
_SEP = "\x1f"  # joins a job's fields (an array instead when a field holds it)

# C's isspace, which Lua's tonumber skips around a number (Python's float() skips more).
_C_SPACE = " \t\n\v\f\r"
_PLAIN = re.compile(r"-?[0-9]+(?:\.[0-9]+)?\Z").match

# (cjson takes control characters inside strings as they are; json's strict mode refuses them)
_DECODE = json.JSONDecoder(strict=False).decode


def lua_number(text: str) -> float | None:
    """Return what Lua's `tonumber` makes of a stored text, or None where it gives nil."""
    if _PLAIN(text):
        return float(text)  # the usual texts: what the engine writes
    if not text:
        return None
    # (Lua reads the text as a C string: it ends at a NUL byte)
    s = text.split("\x00", 1)[0].strip(_C_SPACE)
    # (Python's float() also takes '_' separators and non-ASCII digits; Lua does not)
    if not s or not s.isascii() or "_" in s or s.strip() != s:
        return None
    if s.lstrip("+-")[:2].lower() == "0x":
        try:
            return float.fromhex(s)
        except ValueError:
            return None
    try:
        return float(s)
    except ValueError:
        return None


def _printed(value: float) -> int | float:
    """Return `value` as JSON text printed with %.14g decodes (cjson's number format)."""
    if not math.isfinite(value):
        raise QlessError(f"the engine cannot print the number {value!r} in a job object")
    text = f"{value:.14g}"
    if text.lstrip("-").isdigit():
        return int(text)
    return float(text)


def _stored_number(text: str) -> int | float:
    """Decode a stored number field as `job_object` reports it (0 when not a number)."""
    if len(text) <= 14 and text.isdigit() and text.isascii():
        return int(text)  # the common case: exact in 14 digits
    return _printed(lua_number(text) or 0.0)


def _reencoded(value: Any) -> Any:
    """Return a decoded JSON value as it reads after cjson decodes and encodes it again."""
    if isinstance(value, str) or value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return _printed(float(value))
    if isinstance(value, list):
        # (cjson writes an empty Lua table as an object)
        return [_reencoded(v) for v in value] if value else {}
    if isinstance(value, dict):
        return {k: _reencoded(v) for k, v in value.items()}
    return value


def _has_surrogate(value: Any) -> bool:
    """Whether a decoded value holds a lone surrogate (cjson refuses the \\u escape)."""
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, list):
        return any(_has_surrogate(v) for v in value)
    if isinstance(value, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    return False


def _table(text: str) -> Any:
    """Decode a stored JSON table as the engine's pcall(cjson.decode) + encode reports it;
    None for what the engine reads as an empty table (also text that is not a table)."""
    if not text or text in ("{}", "[]"):
        return None
    try:
        value = _DECODE(text)
    except ValueError:
        return None
    if not isinstance(value, (list, dict)) or not value:
        return None
    if "\\u" in text and _has_surrogate(value):
        return None
    if isinstance(value, list) and all(type(v) is str for v in value):
        return value  # tags, throttles: already what the engine would print
    return _reencoded(value)


def _job(worker: str, f: list[str]) -> dict[str, Any]:
    """Build the lean job object of one job's fields."""
    (jid, klass, queue, expires, data, priority, tags, retries, remaining, failure, tracked,
     throttles, spawned) = f
    left = lua_number(remaining) if remaining else None
    if left is None:
        left = lua_number(retries) or 0.0
    if math.isfinite(left):
        left = float(math.floor(left))  # (job_object floors it)
    return {
        "jid": jid,
        "klass": klass,
        "state": "running",
        "queue": queue,
        "worker": worker,
        "tracked": tracked == "1",
        "priority": _stored_number(priority) if priority else 0,
        "expires": _printed(lua_number(expires) or 0.0),
        "retries": _stored_number(retries),
        "remaining": _printed(left),
        "data": data,
        "tags": (_table(tags) or []) if tags else [],
        "failure": (_table(failure) or {}) if failure else {},
        "spawned_from_jid": spawned or False,
        "throttles": (_table(throttles) or []) if throttles else [],
    }


def decode_worker_reply(reply: Any) -> dict[str, Any]:
    """Return a worker call's reply as {"state"?, "jobs": [job objects], "wake"?}.

    "state" is there for complete.reserve only, "wake" (seconds, -1 for nothing due) only
    when no job came. A reply of any other shape (an engine this package did not load) is
    refused with QlessError, never guessed at.
    """
    if not isinstance(reply, list) or len(reply) < _HEADER or reply[0] != REPLY_SHAPE:
        shown = repr(reply)[:80]
        raise QlessError(
            f"the engine replied in a shape this client does not know ({shown}): "
            f"expected a {REPLY_SHAPE!r} array (engine and client must be the same version)")
    state, wake, worker = reply[1], reply[2], reply[3]
    out: dict[str, Any] = {}
    if state:
        out["state"] = state
    jobs: list[dict[str, Any]] = []
    out["jobs"] = jobs
    for entry in reply[_HEADER:]:
        fields = entry.split(_SEP) if isinstance(entry, str) else entry
        if not isinstance(fields, list) or len(fields) != _FIELDS:
            raise QlessError(f"malformed {REPLY_SHAPE!r} reply: a job entry {entry!r:.80}")
        jobs.append(_job(worker, fields))
    if wake != "":
        out["wake"] = _printed(lua_number(wake) or 0.0)
    return out
