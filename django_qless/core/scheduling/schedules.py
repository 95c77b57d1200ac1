"""Cron schedules: register, sync, list, run now, and keep their ticks topped up.

A cron schedule is a recurring job (`ql:r:<name>`, type `cron`) living in its queue's
keyspace. The client computes its next ticks (cron.py) and hands them to the engine
(cron.lua), which spawns one child per due tick at pop time, atomically, as it spawns any
recurring job: no scheduler process, exactly one job per tick whatever the number of
workers, and idle workers wake for the next tick like for any due time. Workers top the
ticks up now and then (`keep_schedules`, called by the lease reaper).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..exceptions import InvalidArgument
from ..serialization import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    check_int,
    check_klass,
    check_name,
    check_recurring_jid,
    check_tags,
    check_throttles,
    dumps,
    dumps_data,
)
from .cron import check_cron, check_timezone, due_ticks, next_ticks

if TYPE_CHECKING:
    from ..client import Client
    from ..types import QlessClient

__all__ = ["MISSED", "CronSchedule", "ScheduleState", "Schedules", "SyncReport",
           "keep_schedules", "move_schedule"]

log = logging.getLogger("django_qless")

#: What a pop does with ticks that came due while no worker popped the queue.
MISSED = ("skip", "once", "catchup")
# Ticks handed to the engine at a time; more are asked for when half are used.
TICKS = 64
# Seconds between two top-ups by one worker process (a `* * * * *` schedule has 32 min left).
KEEP_EVERY = 300.0
_STATUS = {0: "unchanged", 1: "created", 2: "changed"}


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A validated schedule definition (build one with `CronSchedule.build`)."""

    name: str
    klass: str
    cron: str
    queue: str
    timezone: str = "UTC"
    data: str = "{}"  # JSON object text, stored verbatim
    missed: str = "once"
    catchup: int = 1  # how many missed ticks `missed="catchup"` runs at most
    grace: int = 60  # how late a tick may run under `missed="skip"` (seconds)
    priority: int = 0
    tags: tuple[str, ...] = ()
    retries: int = 5
    throttles: tuple[str, ...] = ()

    @classmethod
    def build(
        cls, name: str, klass: str | type, *, cron: str, queue: str, timezone: str = "UTC",
        data: Mapping[str, Any] | None = None, missed: str = "once", catchup: int = 1,
        grace: int = 60, priority: int = 0, tags: Iterable[str] = (), retries: int = 5,
        throttles: Iterable[str] = (),
    ) -> CronSchedule:
        """Check every field (InvalidArgument naming the bad one) and return the schedule."""
        if missed not in MISSED:
            raise InvalidArgument(f"missed must be one of {', '.join(MISSED)}, got {missed!r}")
        expr = check_cron(cron)
        zone = check_timezone(timezone)
        if not next_ticks(expr, zone, time.time(), 1):
            raise InvalidArgument(f"cron {cron!r} never fires")
        return cls(
            name=check_recurring_jid(name), klass=check_klass(klass), cron=expr,
            queue=check_name("queue", queue), timezone=zone,
            data=dumps_data({} if data is None else data), missed=missed,
            catchup=check_int("catchup", catchup, 1, 1000),
            grace=check_int("grace", grace, 0, 31536000),
            priority=check_int("priority", priority, PRIORITY_MIN, PRIORITY_MAX),
            tags=tuple(check_tags(tags)), retries=check_int("retries", retries, 0, 1000),
            throttles=tuple(check_throttles(throttles)),
        )

    def plan(self, last: float | None, now: float) -> tuple[list[int], int]:
        """Return the ticks to hand over (missed ones the policy may run, then the next
        TICKS) and when to ask for more."""
        keep = self.catchup if self.missed == "catchup" else 1
        past = due_ticks(self.cron, self.timezone, last, now, keep) if last is not None else []
        future = next_ticks(self.cron, self.timezone, now, TICKS)
        refill = future[len(future) // 2] if future else int(now) + 366 * 86400
        return past + future, refill


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """A registered schedule as the engine holds it."""

    name: str
    klass: str
    queue: str
    cron: str
    timezone: str
    missed: str
    catchup: int
    grace: int
    raw_data: str
    priority: int
    tags: tuple[str, ...]
    retries: int
    last: float  # the latest tick consumed (or the registration time)
    count: int  # children spawned so far
    next_run: float | None  # the next tick the engine holds
    stored: int  # ticks the engine holds

    @classmethod
    def from_reply(cls, d: Mapping[str, Any]) -> ScheduleState:
        """Build from a `cron.get` reply."""
        return cls(
            name=d["jid"], klass=d["klass"], queue=d["queue"], cron=d["cron"],
            timezone=d["timezone"], missed=d["missed"], catchup=int(d["bound"]),
            grace=int(d["grace"]), raw_data=d["data"], priority=int(d["priority"]),
            tags=tuple(d.get("tags") or ()), retries=int(d["retries"]), last=float(d["last"]),
            count=int(d["count"]), next_run=None if d.get("next") is None else float(d["next"]),
            stored=int(d["stored"]),
        )

    @property
    def data(self) -> Any:
        """Return the children's data, decoded."""
        return json.loads(self.raw_data)

    def upcoming(self, count: int = 3, *, now: float | None = None) -> list[int]:
        """Return the next `count` run times (epoch seconds) by the cron text."""
        start = max(self.last, time.time() if now is None else now)
        return next_ticks(self.cron, self.timezone, start, count)


@dataclass
class SyncReport:
    """What `Schedules.sync` did, by schedule name."""

    created: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


class Schedules:
    """The cron schedules of a deployment (`client.schedules`)."""

    def __init__(self, client: QlessClient) -> None:
        self._client = client

    def register(self, name: str, klass: str | type, **options: Any) -> str:
        """Create or update schedule `name` (options: see `CronSchedule.build`); return
        "created", "changed" or "unchanged". Registering it again changes nothing."""
        return self.add(CronSchedule.build(name, klass, **options))

    def add(self, schedule: CronSchedule) -> str:
        """Create or update a built schedule; return what happened (see `register`)."""
        home = self._client.for_queue(schedule.queue)
        moved: list[Any] = []
        for other in self._client.clients():
            away = None if other is home else other.call_json("cron.get", schedule.name)
            if away is not None:
                # Its queue moved to another shard: go on with its numbering and ticks.
                moved = ["count", int(away["count"]), "last", float(away["last"])]
                other.call("unrecur", schedule.name)
        old = home.call_json("cron.get", schedule.name)
        now = home.now()
        same = old is not None and (old["cron"], old["timezone"]) == (
            schedule.cron, schedule.timezone)
        ticks, refill = schedule.plan(float(old["last"]) if same else None, now)
        reply = home.call("cron.set", *_set_args(schedule, ticks, refill), *moved)
        return _STATUS[int(reply)]

    def sync(self, schedules: Iterable[CronSchedule]) -> SyncReport:
        """Register every schedule given and remove every other cron schedule: the full set
        an application declares (call it at each deploy or worker start)."""
        wanted = {s.name: s for s in schedules}
        report = SyncReport()
        for schedule in wanted.values():
            getattr(report, self.add(schedule)).append(schedule.name)
        for state in self.all():
            if state.name not in wanted:
                self.remove(state.name)
                report.removed.append(state.name)
        return report

    def remove(self, name: str) -> bool:
        """Delete schedule `name` (children already spawned stay); False if it was absent."""
        name = check_recurring_jid(name)
        found = False
        for client in self._client.clients():
            if client.call("cron.get", name) is not None:
                client.call("unrecur", name)
                found = True
        return found

    def get(self, name: str) -> ScheduleState | None:
        """Return schedule `name`, or None."""
        name = check_recurring_jid(name)
        for client in self._client.clients():
            reply = client.call_json("cron.get", name)
            if reply is not None:
                return ScheduleState.from_reply(reply)
        return None

    def all(self) -> list[ScheduleState]:
        """Return every schedule, by name."""
        found: list[ScheduleState] = []
        for client in self._client.clients():
            names = _names(client)
            if not names:
                continue
            replies = client.pipeline_calls([("cron.get", (n,)) for n in names])
            found += [ScheduleState.from_reply(json.loads(r)) for r in replies if r is not None]
        return sorted(found, key=lambda s: s.name)

    def run_now(self, name: str) -> str:
        """Put one job of schedule `name` now, outside its ticks; return its jid."""
        name = check_recurring_jid(name)
        for client in self._client.clients():
            if client.call("cron.get", name) is not None:
                jid: str = client.call("cron.run", name)
                return jid
        raise InvalidArgument(f"no cron schedule {name!r}")

    def refill(self, *, every: bool = False) -> int:
        """Hand the engine more ticks of the schedules running low (`every`: all of them);
        return how many schedules were topped up."""
        done = 0
        for client in self._client.clients():
            names = _names(client, None if every else client.now())
            for name in names:
                reply = client.call_json("cron.get", name)
                if reply is None:
                    continue
                state = ScheduleState.from_reply(reply)
                schedule = CronSchedule(name, state.klass, state.cron, state.queue,
                                        state.timezone, missed=state.missed,
                                        catchup=state.catchup)
                ticks, refill = schedule.plan(state.last, client.now())
                if int(client.call("cron.ticks", name, state.cron, state.timezone, refill,
                                   dumps(ticks))) >= 0:
                    done += 1
        return done


def _set_args(schedule: CronSchedule, ticks: list[int], refill: int) -> list[Any]:
    """Return the arguments of `cron.set` for a schedule and the ticks handed over."""
    args: list[Any] = [
        schedule.queue, schedule.name, schedule.klass, schedule.data, schedule.cron,
        schedule.timezone, schedule.missed, schedule.catchup, schedule.grace, refill,
        dumps(ticks), "priority", schedule.priority, "tags", dumps(list(schedule.tags)),
        "retries", schedule.retries,
    ]
    if schedule.throttles:
        args += ["throttles", dumps(list(schedule.throttles))]
    return args


def move_schedule(src: Client, dst: Client, name: str) -> bool:
    """Move cron schedule `name` from keyspace `src` to `dst` (a queue moving to another
    shard), numbering and consumed ticks kept; False if `src` does not hold it."""
    found = src.call_json("cron.get", name)
    if found is None:
        return False
    state = ScheduleState.from_reply(found)
    schedule = CronSchedule(
        name, state.klass, state.cron, state.queue, state.timezone, state.raw_data,
        state.missed, state.catchup, state.grace, state.priority, state.tags, state.retries,
        tuple(found.get("throttles") or ()))
    ticks, refill = schedule.plan(state.last, dst.now())
    dst.call("cron.set", *_set_args(schedule, ticks, refill), "count", state.count, "last",
             state.last)
    src.call("unrecur", name)
    return True


def _names(client: Client, due: float | None = None) -> Sequence[str]:
    """Return the schedule names of one keyspace (`due`: those to top up by then)."""
    names: list[str] = client.call("cron.names") if due is None else client.call(
        "cron.names", due)
    return names


_kept_at: list[float] = []  # when this process last topped up (monotonic), if it has


def keep_schedules(deployment: QlessClient) -> None:
    """Top up the ticks of schedules running low, at most every KEEP_EVERY seconds per
    process (a worker's periodic work calls it); log errors, never raise them."""
    now = time.monotonic()
    if _kept_at and now - _kept_at[0] < KEEP_EVERY:
        return
    _kept_at[:] = [now]
    try:
        Schedules(deployment).refill()
    except Exception as exc:  # noqa: BLE001 - a schedule top-up must never stop a worker
        log.warning("schedules: topping up ticks failed (%s); retrying in %.0fs", exc,
                    KEEP_EVERY)
