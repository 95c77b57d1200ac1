"""Cron ticks: the epoch seconds a cron expression fires at in a time zone (croniter does
the calendar, zoneinfo the offsets).

Daylight-saving changes follow cron's usual rule: a wall time that does not exist (02:30
on the night clocks go forward) fires once, at the first time after the gap; a wall time
that happens twice (clocks go back) fires once, at its first occurrence, unless the hour
field starts with `*` (`*/30 * * * *`, `@hourly`): such a schedule is a period of elapsed
time and fires in both hours.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..exceptions import InvalidArgument

__all__ = ["check_cron", "check_timezone", "due_ticks", "next_ticks"]

# What an alias's hour field is (the DST rule above looks at it).
_ALIAS_HOURS = {"@hourly": "*", "@daily": "0", "@midnight": "0", "@weekly": "0",
                "@monthly": "0", "@yearly": "0", "@annually": "0"}
# A cron text never matching (30 February) is found by searching this many years ahead.
_SEARCH_YEARS = 30


def check_cron(text: object) -> str:
    """Check a five-field cron expression (or an alias such as `@daily`); return it."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(f"cron must be a non-empty string, got {text!r}")
    expr = " ".join(text.split())
    if len(expr) > 256 or not expr.isascii() or not expr.isprintable():
        raise InvalidArgument(f"cron {text!r} is not valid: too long or not printable ASCII")
    if expr.startswith("@"):
        if expr.lower() not in _ALIAS_HOURS:
            raise InvalidArgument(
                f"cron {text!r} is not valid: aliases are {', '.join(sorted(_ALIAS_HOURS))}")
        expr = expr.lower()
    elif len(expr.split()) != 5:
        raise InvalidArgument(
            f"cron {text!r} is not valid: it needs five fields "
            "(minute hour day-of-month month day-of-week)")
    from croniter import CroniterError, croniter

    try:
        croniter(expr, datetime(2000, 1, 1, tzinfo=UTC))
    except (CroniterError, ValueError, KeyError) as exc:
        raise InvalidArgument(f"cron {text!r} is not valid: {exc}") from None
    return expr


def check_timezone(name: object) -> str:
    """Check an IANA time zone name (e.g. `Europe/Paris`); return it."""
    if not isinstance(name, str) or not name or len(name) > 64:
        raise InvalidArgument(f"timezone must be an IANA time zone name, got {name!r}")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(f"unknown time zone {name!r}") from None
    return name


def _wildcard_hour(expr: str) -> bool:
    """Tell whether the hour field starts with `*` (the schedule fires in every hour)."""
    hour = _ALIAS_HOURS.get(expr) or expr.split()[1]
    return hour.startswith("*")


def _second_occurrence(when: datetime, zone: tzinfo) -> bool:
    """Tell whether `when` is the repeat of a wall time the clocks went back over."""
    wall = when.replace(tzinfo=None)
    first = wall.replace(fold=0, tzinfo=zone).timestamp()
    second = wall.replace(fold=1, tzinfo=zone).timestamp()
    return first != second and when.timestamp() == max(first, second)


def _ticks(expr: str, zone_name: str, start: float, backwards: bool) -> Iterator[int]:
    """Yield the ticks after (or before) `start`, one per distinct instant, DST rule applied."""
    # (imported when first needed: a worker with no schedule never loads the parser)
    from croniter import CroniterBadDateError, croniter

    zone = ZoneInfo(zone_name)
    it = croniter(expr, datetime.fromtimestamp(start, zone),
                  max_years_between_matches=_SEARCH_YEARS)
    keep_repeats = _wildcard_hour(expr)
    previous: int | None = None
    step = it.get_prev if backwards else it.get_next
    while True:
        try:
            when = step(datetime)
        except CroniterBadDateError:
            return
        tick = int(when.timestamp())
        if tick == previous:
            continue
        previous = tick
        if not keep_repeats and _second_occurrence(when.astimezone(zone), zone):
            continue
        yield tick


def next_ticks(expr: str, zone: str, after: float, count: int) -> list[int]:
    """Return the next `count` ticks strictly after `after` (fewer if the cron ends)."""
    out: list[int] = []
    for tick in _ticks(expr, zone, math.floor(after), backwards=False):
        if tick > after:
            out.append(tick)
            if len(out) >= count:
                break
    return out


def due_ticks(expr: str, zone: str, after: float, until: float, count: int) -> list[int]:
    """Return the latest `count` ticks in (`after`, `until`], oldest first."""
    out: list[int] = []
    for tick in _ticks(expr, zone, math.floor(until) + 1, backwards=True):
        if tick <= after or len(out) >= count:
            break
        if tick <= until:
            out.append(tick)
    out.reverse()
    return out
