"""The enqueue machinery behind ``@job``: options, argument encoding, timing, unique jobs.

The handle an enqueue returns and the on-commit send (``dispatch``) are in ``handle.py``,
the errors in ``errors.py``; their names are importable from here too.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from django.core.serializers.json import DjangoJSONEncoder
from django.db import DEFAULT_DB_ALIAS
from django.utils import timezone

from django_qless.conf import get_settings
from django_qless.core.exceptions import InvalidArgument
from django_qless.errors import InvalidJobArgument, JobFailedError, ResultNotReady
from django_qless.handle import RESULT_KEY, JobHandle, dispatch
from django_qless.ratelimits import check_rate_options
from django_qless.retries import Backoff, RetryPolicy

__all__ = [
    "ACTIVE_STATES",
    "RESULT_KEY",
    "Backoff",
    "InvalidJobArgument",
    "JobFailedError",
    "JobHandle",
    "JobOptions",
    "KIND_LIMITS",
    "ResultNotReady",
    "RetryPolicy",
    "check_timing",
    "dispatch",
    "encode_arguments",
    "to_json",
    "unique_jid",
]

log = logging.getLogger("django_qless")

Delay = float | int | timedelta
When = datetime | float | int
UniquePolicy = Literal["replace", "skip", "raise_priority"]
UNIQUE_POLICIES = ("replace", "skip", "raise_priority")
ACTIVE_STATES = frozenset({"waiting", "scheduled", "depends", "running", "stalled", "throttled"})
# A job kind's time limits: kept in the worker's registry, so never per call.
KIND_LIMITS = ("timeout", "soft_timeout")


@dataclass(frozen=True)
class JobOptions:
    """Every option of a put; ``@job`` defaults, refined by ``.using()`` and per call."""

    queue: str = "default"
    priority: int = 0
    tags: tuple[str, ...] = ()
    retries: int = 5
    delay: float = 0.0
    depends: tuple[str, ...] = ()
    throttles: tuple[str, ...] = ()
    jid: str | None = None
    unique: UniquePolicy | None = None
    client: str | None = None
    commit_mode: str | None = None
    database: str = DEFAULT_DB_ALIAS
    track: bool = False
    offset: float = 0.0
    backlog: int = 1  # at most backlog + 1 catch-up children after an outage (0 = unlimited)
    rate_limit: str | None = None  # e.g. "10/s": a limit on this job kind (ratelimits.py)
    rate_key: str | None = None  # one budget per value: a parameter name, or a data path
    retry: RetryPolicy | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("tags", "depends", "throttles"):
            value = getattr(self, name)
            if isinstance(value, str | bytes) or not isinstance(value, Iterable):
                kind = "a string" if isinstance(value, str | bytes) else type(value).__name__
                raise InvalidJobArgument(f"{name} must be a list of strings, not {kind}: "
                                         f"{_show(value)}")
            object.__setattr__(self, name, tuple(value))
        if self.unique is True:  # type: ignore[comparison-overlap]
            object.__setattr__(self, "unique", "skip")
        elif self.unique is False:  # type: ignore[comparison-overlap]
            object.__setattr__(self, "unique", None)
        if self.unique is not None and self.unique not in UNIQUE_POLICIES:
            raise ValueError(f"unique must be one of {UNIQUE_POLICIES} or True, "
                             f"not {self.unique!r}")
        if self.commit_mode not in (None, "on_commit", "immediate"):
            raise ValueError(f'commit_mode must be "on_commit" or "immediate", '
                             f"not {self.commit_mode!r}")
        if isinstance(self.delay, timedelta):
            object.__setattr__(self, "delay", self.delay.total_seconds())
        check_rate_options(self.rate_limit, self.rate_key)

    def merge(self, changes: Mapping[str, Any]) -> JobOptions:
        """Return a copy with ``changes`` applied (unknown names raise TypeError)."""
        known = {f.name for f in fields(self)}
        changes = dict(changes)
        if "on_commit" in changes:
            flag = changes.pop("on_commit")
            if flag is not None:
                changes["commit_mode"] = "on_commit" if flag else "immediate"
        kind_only = [name for name in KIND_LIMITS if name in changes]
        if kind_only:
            raise TypeError(f"{kind_only[0]} is a time limit of the job kind: give it to "
                            "@job(...), not per call")
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(f"unknown job option(s): {', '.join(unknown)}; "
                            f"valid: {', '.join(sorted(known | {'on_commit'}))}")
        return replace(self, **changes)

    def validate(self, data: Mapping[str, Any]) -> None:
        """Check everything the engine would refuse, now rather than after the commit."""
        from django_qless.core import serialization as ser

        ser.check_name("queue", self.queue)
        if self.jid is not None:
            ser.check_jid(self.jid)
        ser.check_int("priority", self.priority, ser.PRIORITY_MIN, ser.PRIORITY_MAX)
        ser.check_int("retries", self.retries, 0, 1000)
        ser.check_number("delay", self.delay, 0, ser.MAX_DELAY)
        ser.check_tags(self.tags)
        ser.check_depends(self.depends, self.jid)
        ser.check_throttles(self.throttles)
        ser.dumps_data(dict(data))

    @property
    def alias(self) -> str:
        """Return the alias this job goes to (explicit, else routed by queue)."""
        return self.client or get_settings().alias_for_queue(self.queue)


def to_json(value: Any, where: str) -> Any:
    """Return ``value`` as plain JSON data (DjangoJSONEncoder types become strings)."""
    try:
        text = json.dumps(value, cls=DjangoJSONEncoder, allow_nan=False)
    except RecursionError:
        raise InvalidJobArgument(f"{where} is nested too deeply to be JSON data") from None
    except (TypeError, ValueError) as exc:
        raise InvalidJobArgument(
            f"{where} is not JSON-serialisable: {exc}. Job arguments must be JSON data "
            "(datetime, date, Decimal, UUID and lazy strings are sent as strings); "
            "pass a primary key instead of a model instance."
        ) from None
    return json.loads(text)


def encode_arguments(name: str, signature: inspect.Signature | None, args: Sequence[Any],
                     kwargs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Bind arguments to the signature and encode them as JSON (clear TypeErrors)."""
    if signature is not None:
        # An unexpected keyword first: bind() would report a missing argument before it, and
        # `add(1, c=2)` for `add(a, b)` is a misspelt name, not a forgotten one.
        params = signature.parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            unexpected = [k for k in kwargs
                          if k not in params or params[k].kind is params[k].POSITIONAL_ONLY]
            if unexpected:
                raise TypeError(f"{name}(): got an unexpected keyword argument "
                                f"{unexpected[0]!r}")
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{name}(): {exc}") from None
    positional = [p.name for p in (signature.parameters.values() if signature else ())
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    out_args = []
    for index, value in enumerate(args):
        label = positional[index] if index < len(positional) else f"*args[{index}]"
        out_args.append(to_json(value, f"{name}() argument {label!r}"))
    out_kwargs = {}
    for key, value in kwargs.items():
        out_kwargs[key] = to_json(value, f"{name}() argument {key!r}")
    return out_args, out_kwargs


def unique_jid(klass: str, data: Mapping[str, Any]) -> str:
    """Derive a stable jid from the job's class and its (JSON) data."""
    text = json.dumps([klass, data], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


# Epoch seconds before 2001-09-09 are refused: such a number is a delay passed by mistake.
MIN_EPOCH = 1_000_000_000


def epoch_of(when: datetime | float) -> float:
    """Return epoch seconds for a datetime (naive: Django's USE_TZ rule) or epoch seconds."""
    if isinstance(when, datetime):
        if timezone.is_naive(when):
            # USE_TZ: the current time zone, as Django reads naive datetimes; else local time.
            when = timezone.make_aware(when) if _use_tz() else when.astimezone()
        return when.timestamp()
    return float(when)


def resolve_delay(delay: float | timedelta | None = None, when: datetime | float | None = None,
                  now: float | None = None) -> float:
    """Return seconds to wait for a delay or an absolute time (never negative)."""
    if when is not None:
        base = now if now is not None else timezone.now().timestamp()
        return max(0.0, epoch_of(when) - base)
    if isinstance(delay, timedelta):
        return max(0.0, delay.total_seconds())
    return max(0.0, float(delay or 0))


def check_timing(options: JobOptions, *, delay: float | timedelta | None = None,
                 when: datetime | float | None = None,
                 interval: float | timedelta | None = None) -> None:
    """Check an explicit delay, run time or recurring schedule before anything is sent.

    The put itself happens later (after the commit, or never in eager mode), so a value the
    engine would refuse must fail here, in the caller's code.
    """
    from django_qless.core import serialization as ser

    if delay is not None:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
        ser.check_number("delay", seconds, 0, ser.MAX_DELAY)
    if when is not None:
        if isinstance(when, bool) or not isinstance(when, datetime | int | float):
            raise InvalidJobArgument(f"when must be a datetime or epoch seconds, got "
                                     f"{_show(when)}")
        if not isinstance(when, datetime):
            ser.check_number("when", when)
            if when < MIN_EPOCH:
                raise InvalidArgument(
                    f"when is epoch seconds (a time), got {_show(when)}, which is before "
                    "2001; for a delay use enqueue_in()")
        # A time in the past means "now"; a time beyond the engine's horizon is refused.
        if resolve_delay(when=when) > ser.MAX_DELAY:
            shown = when.isoformat() if isinstance(when, datetime) else _show(when)
            raise InvalidArgument(f"when must be at most {ser.MAX_DELAY} seconds (ten years) "
                                  f"ahead, got {shown}")
    if interval is not None:
        seconds = interval.total_seconds() if isinstance(interval, timedelta) else interval
        ser.check_number("interval", seconds, 1, ser.MAX_INTERVAL)
        ser.check_number("offset", options.offset, 0, ser.MAX_INTERVAL)
        ser.check_int("backlog", options.backlog, 0)
        if options.jid is not None:
            ser.check_recurring_jid(options.jid)


def _show(value: object) -> str:
    """Return a short repr of a refused value."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _use_tz() -> bool:
    from django.conf import settings

    return bool(getattr(settings, "USE_TZ", True))
