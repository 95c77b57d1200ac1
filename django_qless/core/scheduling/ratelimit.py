"""Rate limits: at most N jobs started per period, per queue or per job kind, optionally per key.

The engine enforces them at pop (ratelimit.lua): a job over a limit waits, out of the work
set, until its window opens, and the reply that tells an idle worker how long until due work
includes that opening, so the worker sleeps until then without asking Redis.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..exceptions import InvalidArgument
from ..serialization import check_text

if TYPE_CHECKING:
    from ..client import Client

__all__ = [
    "RateLimit",
    "RateLimitError",
    "RateLimitStatus",
    "RateLimits",
    "Scope",
    "check_key",
    "format_rate",
    "parse_rate",
]

Scope = Literal["queue", "kind"]

# The engine's bounds (ratelimit.lua): a budget keeps one entry per start in its window.
MAX_JOBS = 100_000
MIN_PERIOD, MAX_PERIOD = 0.001, 2_678_400.0
_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
          "h": 3600.0, "hour": 3600.0, "d": 86400.0, "day": 86400.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*$")
_KEY = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+){0,7}$")


class RateLimitError(InvalidArgument):
    """A rate limit, rate text or rate key was refused."""


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A rate as N jobs per `period` seconds."""

    limit: int
    period: float

    def __str__(self) -> str:
        return format_rate(self.limit, self.period)


def parse_rate(rate: str | RateLimit) -> RateLimit:
    """Parse "100/m", "10/s", "1000/h", "5/30s" or "2/day" into a RateLimit."""
    if isinstance(rate, RateLimit):
        limit, period = rate.limit, rate.period
    else:
        if not isinstance(rate, str):
            raise RateLimitError(f"rate must be text like '100/m', not {type(rate).__name__}")
        match = _RATE.match(rate.lower())
        if not match or match.group(3) not in _UNITS:
            raise RateLimitError(
                f"rate {rate!r} is not N/unit: write it like '100/m', '10/s', '1000/h' or "
                f"'5/30s' (units s, m, h, d)")
        limit = int(match.group(1))
        period = float(match.group(2) or 1) * _UNITS[match.group(3)]
    if not 1 <= limit <= MAX_JOBS:
        raise RateLimitError(f"rate {rate}: the number of jobs must be 1 to {MAX_JOBS}")
    if not MIN_PERIOD <= period <= MAX_PERIOD:
        raise RateLimitError(
            f"rate {rate}: the period must be {MIN_PERIOD} s to {int(MAX_PERIOD)} s (31 days)")
    return RateLimit(limit, period)


def format_rate(limit: int, period: float) -> str:
    """Return a rate as text ("100/m" for 100 per 60 s, "5/30s" otherwise)."""
    for unit, seconds in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if period == seconds:
            return f"{limit}/{unit}"
    return f"{limit}/{period:g}s"


def check_key(key: str | None) -> str:
    """Return a rate key path ('' for none): a dotted path into the job's data object."""
    if key is None or key == "":
        return ""
    if not isinstance(key, str) or len(key) > 128 or not _KEY.match(key):
        raise RateLimitError(
            f"rate key {key!r} must be a dotted path of names into the job's data (like "
            f"'customer' or 'kwargs.user_id'; letters, digits, '_' and '-', at most 8 parts)")
    return key


@dataclass(frozen=True, slots=True)
class RateLimitStatus:
    """A limit as stored, with its use in the current window."""

    scope: Scope
    name: str
    limit: int
    period: float
    key: str  # '' = one budget; else the data path whose value picks the budget
    used: int  # starts in the window (of the fullest key's budget, when keyed)
    opens_in: float  # seconds until that budget has room again (0: it has room)
    keys: int  # keys with starts in the window (keyed limits)
    limited: int  # jobs of the queue waiting for their window ('queue' scope)

    @property
    def rate(self) -> str:
        """Return the limit as text, like "100/m"."""
        return format_rate(self.limit, self.period)

    @classmethod
    def from_reply(cls, reply: Any) -> RateLimitStatus | None:
        """Build from a `rate.get` reply (None: no limit)."""
        if reply is None:
            return None
        info = json.loads(reply) if isinstance(reply, (str, bytes)) else reply
        return cls(info["scope"], str(info["name"]), int(info["max"]), float(info["period"]),
                   str(info.get("key") or ""), int(info.get("used") or 0),
                   float(info.get("next") or 0), int(info.get("keys") or 0),
                   int(info.get("limited") or 0))


def _name(scope: str, name: str) -> str:
    if scope == "queue":
        return check_text("queue", name, 64)
    return check_text("job class", name, 256)


class RateLimits:
    """`client.rate_limits`: define, read and remove limits by queue or job kind."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    def set(self, scope: Scope, name: str, rate: str | RateLimit, *,
            key: str | None = None) -> RateLimit:
        """Limit the jobs of queue or kind `name` to `rate` (one budget per `key` value)."""
        if scope not in ("queue", "kind"):
            raise RateLimitError(f"scope must be 'queue' or 'kind', not {scope!r}")
        parsed = parse_rate(rate)
        self._client.call("rate.set", scope, _name(scope, name), parsed.limit,
                          repr(parsed.period), check_key(key))
        return parsed

    def get(self, scope: Scope, name: str) -> RateLimitStatus | None:
        """Return the limit of queue or kind `name` and its use now (None: no limit)."""
        return RateLimitStatus.from_reply(
            self._client.call("rate.get", scope, _name(scope, name)))

    def delete(self, scope: Scope, name: str) -> None:
        """Remove the limit of queue or kind `name` (jobs waiting for a window go back)."""
        self._client.call("rate.delete", scope, _name(scope, name))

    def kinds(self) -> list[str]:
        """Return the job classes that have a limit."""
        return [str(k) for k in self._client.call_json("rate.kinds")]
