"""`client.config`: the engine's options (`ql:config`), as a mutable mapping."""

from __future__ import annotations

import json
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from .exceptions import InvalidArgument
from .serialization import check_int, check_text

if TYPE_CHECKING:
    from .client import Client

__all__ = ["KNOWN_OPTIONS", "QUEUE_OPTION_SUFFIXES", "Config", "check_config", "is_known_option"]

# Lower bounds of the integer options (docs/engine.md, "config values").
_MINIMUM = {
    "heartbeat": 1,
    "grace-period": 0,
    "jobs-history": 0,
    "jobs-history-count": 0,
    "max-worker-age": 1,
    "max-job-history": 0,
    "stats-history": 0,
    "histogram-history": 0,
    "lean-job-records": 0,
}

# Every option the engine reads or lists (docs/engine.md); per-queue ones end in a suffix.
KNOWN_OPTIONS = ("application", *_MINIMUM)
QUEUE_OPTION_SUFFIXES = ("-heartbeat", "-max-concurrency")


def is_known_option(key: str) -> bool:
    """Tell whether the engine uses `key` (a global option or `<queue>-heartbeat` etc.)."""
    if key in KNOWN_OPTIONS:
        return True
    return any(key.endswith(s) and len(key) > len(s) for s in QUEUE_OPTION_SUFFIXES)


def check_config(key: str, value: object) -> str:
    """Validate an option and return the text to store."""
    check_text("config key", key, 256)
    name = f"config {key}"
    if key in _MINIMUM:
        number = check_int(name, value, _MINIMUM[key])
        if key == "max-job-history" and number in (1, 2):
            raise InvalidArgument(f"{name} must be 0 (unlimited) or >= 3, got {value!r}")
        if key == "lean-job-records" and number > 1:
            raise InvalidArgument(f"{name} must be 0 or 1, got {value!r}")
        return str(number)
    if key.endswith("-heartbeat"):
        return str(check_int(name, value, 1))
    if key.endswith("-max-concurrency"):
        return str(check_int(name, value, 0))
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InvalidArgument(f"{name} must be a string or a number, got {value!r}")
    return value if isinstance(value, str) else json.dumps(value)


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
