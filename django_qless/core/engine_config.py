"""The engine's options (`ql:config`): their bounds, defaults and checks."""

from __future__ import annotations

import json

from .exceptions import InvalidArgument
from .serialization import check_int, check_text

__all__ = [
    "BOUNDS",
    "DEFAULTS",
    "KNOWN_OPTIONS",
    "QUEUE_BOUNDS",
    "QUEUE_OPTION_SUFFIXES",
    "allowed_text",
    "bounds_of",
    "check_config",
    "is_known_option",
    "queue_option_rules",
    "queue_settings_bounds",
]

_DAY = 86400

# Bounds of the integer options, inclusive, as the engine enforces them (docs/engine.md,
# "Option bounds"); `max-job-history` also takes 0 (unlimited).
BOUNDS: dict[str, tuple[int, int]] = {
    "heartbeat": (1, 7 * _DAY),
    "grace-period": (0, _DAY),
    "jobs-history": (0, 3650 * _DAY),
    "jobs-history-count": (0, 100_000_000),
    "max-worker-age": (1, 365 * _DAY),
    "max-job-history": (3, 10_000),
    "stats-history": (0, 3650),
    "histogram-history": (0, 3650),
    "lean-job-records": (0, 1),
}
# Bounds of the per-queue options, by suffix.
QUEUE_BOUNDS: dict[str, tuple[int, int]] = {
    "-heartbeat": BOUNDS["heartbeat"],
    "-max-concurrency": (0, 1_000_000),
}

# The engine's defaults, as `config.get` lists them when nothing is stored (lua/base.lua).
DEFAULTS: dict[str, str | int] = {
    "application": "qless",
    "heartbeat": 60,
    "grace-period": 10,
    "stats-history": 30,
    "histogram-history": 7,
    "jobs-history-count": 50000,
    "jobs-history": 604800,
}

def queue_settings_bounds() -> dict[str, tuple[int, int]]:
    """Return the bounds of a queue's own settings by name: heartbeat, max_concurrency."""
    return {"heartbeat": QUEUE_BOUNDS["-heartbeat"],
            "max_concurrency": QUEUE_BOUNDS["-max-concurrency"]}


# Every option the engine reads or lists (docs/engine.md); per-queue ones end in a suffix.
KNOWN_OPTIONS = ("application", *BOUNDS)
QUEUE_OPTION_SUFFIXES = tuple(QUEUE_BOUNDS)


def is_known_option(key: str) -> bool:
    """Tell whether the engine uses `key` (a global option or `<queue>-heartbeat` etc.)."""
    if key in KNOWN_OPTIONS:
        return True
    return any(key.endswith(s) and len(key) > len(s) for s in QUEUE_OPTION_SUFFIXES)


def bounds_of(key: str) -> tuple[int, int] | None:
    """Return the inclusive bounds of an integer option, or None for a free-form one."""
    if key in BOUNDS:
        return BOUNDS[key]
    for suffix, bounds in QUEUE_BOUNDS.items():
        if key.endswith(suffix):
            return bounds
    return None


_DAY_OPTIONS = ("stats-history", "histogram-history")
_SECOND_OPTIONS = ("heartbeat", "grace-period", "jobs-history", "max-worker-age")


def allowed_text(key: str) -> str:
    """Describe the values an option takes, as the engine checks them ('' if unknown)."""
    bounds = bounds_of(key)
    if bounds is None:
        return "any text" if is_known_option(key) else ""
    lo, hi = bounds
    if key == "lean-job-records":
        return "0 or 1"
    unit = " days" if key in _DAY_OPTIONS else " s" if _unit(key).endswith("(seconds)") else ""
    text = f"{lo:,} to {hi:,}{unit}"
    return f"0 (unlimited) or {text}" if key == "max-job-history" else text


def queue_option_rules() -> list[tuple[str, str]]:
    """Return each per-queue option's suffix and the values it takes."""
    return [(suffix, allowed_text("q" + suffix)) for suffix in QUEUE_OPTION_SUFFIXES]


def check_config(key: str, value: object) -> str:
    """Validate an option and return the text to store."""
    check_text("config key", key, 256)
    name = f"config {key}"
    bounds = bounds_of(key)
    if bounds is not None:
        lo, hi = bounds
        number = check_int(name, value)
        if number == 0 and key == "max-job-history":
            return "0"
        if not lo <= number <= hi:
            zero = "0 (unlimited) or " if key == "max-job-history" else ""
            raise InvalidArgument(f"{name} must be {zero}an integer from {lo} to {hi}"
                                  f"{_unit(key)}, got {value!r}")
        return str(number)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InvalidArgument(f"{name} must be a string or a number, got {value!r}")
    return value if isinstance(value, str) else json.dumps(value)


def _unit(key: str) -> str:
    """Return the unit of an option's value, for messages."""
    if key in ("stats-history", "histogram-history"):
        return " (days)"
    if key in _SECOND_OPTIONS or key.endswith("-heartbeat"):
        return " (seconds)"
    return ""
