"""Cron schedules declared in Django: ``@job(cron=...)`` and ``QLESS["SCHEDULE"]``.

``sync_schedules()`` registers the full declared set with every alias and removes the cron
schedules no longer declared; the worker command calls it at start, and
``manage.py qless schedules --sync`` at deploy. Registering an unchanged set changes nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from django_qless.core.exceptions import InvalidArgument
from django_qless.core.scheduling.cron import check_cron, check_timezone
from django_qless.core.scheduling.schedules import MISSED, CronSchedule, SyncReport

__all__ = ["CRON_OPTIONS", "declare", "declared_schedules", "pop_cron_options",
           "schedule_name", "schedule_rows", "sync_schedules"]

#: ``@job`` keywords that declare a cron schedule instead of enqueue options.
CRON_OPTIONS = ("cron", "timezone", "missed", "catchup", "grace")
_ENTRY_KEYS = frozenset({"job", "cron", "timezone", "args", "kwargs", "data", "queue", "client",
                         "missed", "catchup", "grace", "priority", "tags", "retries",
                         "throttles"})
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,48}$")


@dataclass(frozen=True)
class _Declared:
    """A schedule declared with ``@job(cron=...)``: the job and its cron options."""

    target: Any  # a JobFunction or JobClass
    options: Mapping[str, Any]


_declared: dict[str, _Declared] = {}


def schedule_name(klass: str) -> str:
    """Return the schedule name of a job's klass: the klass itself when it fits a jid."""
    if _NAME.match(klass):
        return klass
    return "cron-" + hashlib.sha1(klass.encode(), usedforsecurity=False).hexdigest()[:40]


def pop_cron_options(options: dict[str, Any]) -> dict[str, Any] | None:
    """Take the cron keywords out of ``@job`` options and check them; None if no cron."""
    found = {k: options.pop(k) for k in CRON_OPTIONS if k in options}
    if not found:
        return None
    if "cron" not in found:
        raise TypeError(f"@job({', '.join(found)}=...) needs cron=")
    check_cron(found["cron"])
    check_timezone(found.get("timezone", "UTC"))
    if found.get("missed", "once") not in MISSED:
        raise InvalidArgument(f"missed must be one of {', '.join(MISSED)}, "
                              f"got {found['missed']!r}")
    return found


def declare(target: Any, cron_options: Mapping[str, Any]) -> None:
    """Remember the schedule of a decorated job (registered by ``sync_schedules``)."""
    _declared[schedule_name(target.klass)] = _Declared(target, dict(cron_options))


def _build(name: str, target: Any, data: Mapping[str, Any], queue: str | None,
           extra: Mapping[str, Any]) -> CronSchedule:
    options = target.options
    return CronSchedule.build(
        name, target.klass, queue=queue or options.queue, data=data,
        priority=extra.get("priority", options.priority),
        tags=extra.get("tags", options.tags), retries=extra.get("retries", options.retries),
        throttles=extra.get("throttles", options.throttles),
        **{k: extra[k] for k in CRON_OPTIONS if k in extra},
    )


def _job_of(path: str) -> Any:
    """Return the JobFunction or JobClass a dotted path names."""
    try:
        found = import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(f"cannot import {path!r}: {exc}") from None
    target = getattr(found, "qless_job", found)
    if not hasattr(target, "klass") or not hasattr(target, "options"):
        raise ImproperlyConfigured(f"{path!r} is not a @job function or class")
    return target


def _data_of(target: Any, entry: Mapping[str, Any]) -> dict[str, Any]:
    """Return the job data of a settings entry: args/kwargs (function) or data (class)."""
    if hasattr(target, "signature"):
        args, kwargs = entry.get("args", []), entry.get("kwargs", {})
        if not isinstance(args, list | tuple) or not isinstance(kwargs, dict):
            raise InvalidArgument("args must be a list and kwargs a dict")
        data: dict[str, Any] = target._data(tuple(args), kwargs)
        return data
    value = entry.get("data", {})
    if not isinstance(value, dict):
        raise InvalidArgument(f"data must be a dict, got {type(value).__name__}")
    return value


def _from_settings(raw: object) -> Iterable[tuple[str, CronSchedule, str | None]]:
    """Yield (alias, schedule, explicit alias) for each ``QLESS["SCHEDULE"]`` entry."""
    if not isinstance(raw, dict):
        raise ImproperlyConfigured("QLESS['SCHEDULE'] must be a dict: name -> schedule")
    for name, entry in raw.items():
        where = f"QLESS['SCHEDULE'][{name!r}]"
        try:
            if not isinstance(entry, dict):
                raise InvalidArgument("must be a dict with at least 'job' and 'cron'")
            unknown = set(entry) - _ENTRY_KEYS
            if unknown:
                raise InvalidArgument(f"unknown keys {sorted(unknown)}; allowed: "
                                      f"{', '.join(sorted(_ENTRY_KEYS))}")
            if "job" not in entry or "cron" not in entry:
                raise InvalidArgument("needs 'job' (a dotted path to a @job) and 'cron'")
            target = _job_of(entry["job"])
            schedule = _build(name, target, _data_of(target, entry), entry.get("queue"), entry)
        except (InvalidArgument, ImproperlyConfigured, TypeError) as exc:
            raise ImproperlyConfigured(f"{where}: {exc}") from None
        yield schedule.queue, schedule, entry.get("client")


def declared_schedules() -> dict[str, list[CronSchedule]]:
    """Return every declared schedule by alias (``@job(cron=...)``, then the settings)."""
    from django_qless.conf import get_settings
    from django_qless.registry import setup

    setup()  # the job modules are imported: their decorators have declared
    conf = get_settings()
    by_alias: dict[str, list[CronSchedule]] = {alias: [] for alias in conf.aliases}
    # The settings first: the modules they name may declare more with @job(cron=...).
    raw = getattr(settings, "QLESS", {}).get("SCHEDULE", {})
    for queue, schedule, alias in list(_from_settings(raw)):
        by_alias.setdefault(alias or conf.alias_for_queue(queue), []).append(schedule)
    for name, declared in _declared.items():
        target = declared.target
        data = target._data((), {}) if hasattr(target, "signature") else {}
        schedule = _build(name, target, data, None, declared.options)
        by_alias.setdefault(target.options.alias, []).append(schedule)
    return by_alias


def sync_schedules(aliases: Iterable[str] | None = None) -> dict[str, SyncReport]:
    """Register the declared schedules with each alias (all, or those given) and remove
    the cron schedules no longer declared there; return what changed per alias."""
    from django_qless.clients import get_client

    wanted = declared_schedules()
    chosen = list(wanted) if aliases is None else list(aliases)
    return {alias: get_client(alias).schedules.sync(wanted.get(alias, [])) for alias in chosen}


def schedule_rows(aliases: Iterable[str]) -> list[dict[str, Any]]:
    """Return every registered schedule of the aliases as plain data (CLI, dashboard)."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from django_qless.clients import get_client

    rows = []
    for alias in aliases:
        for state in get_client(alias).schedules.all():
            zone = ZoneInfo(state.timezone)
            upcoming = [datetime.fromtimestamp(t, zone).isoformat() for t in state.upcoming(3)]
            rows.append({
                "alias": alias, "name": state.name, "klass": state.klass, "queue": state.queue,
                "cron": state.cron, "timezone": state.timezone, "missed": state.missed,
                "catchup": state.catchup, "count": state.count, "next_run": state.next_run,
                "upcoming": upcoming,
            })
    return rows
