"""Path converters that accept exactly the names the engine accepts (docs/engine.md)."""

from __future__ import annotations

import re

__all__ = [
    "GroupConverter",
    "JidConverter",
    "QueueConverter",
    "StateConverter",
    "TagConverter",
    "ThrottleConverter",
    "WorkerConverter",
    "CONVERTERS",
    "FlowConverter",
]

_PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]+$")


class _Converter:
    """Match a path segment with ``regex`` and check the engine's byte limit."""

    regex = "[^/]+"
    max_bytes = 64

    def check(self, value: str) -> None:
        """Raise ValueError for a value the engine would refuse (the URL then 404s)."""
        if not value or len(value.encode("utf-8")) > self.max_bytes:
            raise ValueError(value)
        if not _PRINTABLE.match(value):
            raise ValueError(value)

    def to_python(self, value: str) -> str:
        self.check(value)
        return value

    def to_url(self, value: str) -> str:
        self.check(value)
        return value


class QueueConverter(_Converter):
    """A queue name: 1-64 chars of ``[A-Za-z0-9_.-]``."""

    regex = r"[A-Za-z0-9_.\-]{1,64}"


class JidConverter(_Converter):
    """A jid: 1-64 chars of ``[A-Za-z0-9_.-]``, not shaped like another job's sub-key."""

    regex = r"[A-Za-z0-9_.\-]{1,64}"

    def check(self, value: str) -> None:
        super().check(value)
        if value.endswith(("-history", "-dependents", "-dependencies")):
            raise ValueError(value)


class StateConverter(_Converter):
    """A queue tab: one of the job states a queue lists."""

    regex = "running|waiting|scheduled|stalled|depends|recurring|throttled"


class WorkerConverter(_Converter):
    """A worker name: 1-128 printable ASCII chars, no space, no colon (may hold a slash)."""

    regex = r"[!-9;-~]{1,128}"
    max_bytes = 128


class TagConverter(_Converter):
    """A tag: 1-64 printable chars (may hold a slash, so it ends the path)."""

    regex = ".+"
    max_bytes = 64


class GroupConverter(_Converter):
    """A failure group: 1-256 chars (may hold a slash, so it ends the path)."""

    regex = ".+"
    max_bytes = 256


class ThrottleConverter(_Converter):
    """A throttle id: 1-128 printable chars (may hold a slash, so it ends the path)."""

    regex = ".+"
    max_bytes = 128


class FlowConverter(_Converter):
    """A flow id: ``fl``, 24 hex digits, a dot and its number of steps."""

    regex = r"fl[0-9a-f]{24}\.[1-9][0-9]{0,3}"


CONVERTERS = {
    "qless_queue": QueueConverter,
    "qless_jid": JidConverter,
    "qless_state": StateConverter,
    "qless_worker": WorkerConverter,
    "qless_tag": TagConverter,
    "qless_group": GroupConverter,
    "qless_throttle": ThrottleConverter,
    "qless_flow": FlowConverter,
}
