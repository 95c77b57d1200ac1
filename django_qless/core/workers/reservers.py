"""Which queues to reserve from, and in what order (ordered, round-robin, shuffled).

Queues are given by name or by glob pattern (`images.*`); patterns are resolved against the
known queues now and then, and at once when a wake-up names a queue we have not seen yet.
"""

from __future__ import annotations

import fnmatch
import random
import time
from collections.abc import Callable, Sequence

from django_qless.core.engine.keyspace import DEFAULT, Keyspace

__all__ = ["QueueSelection", "Reserver", "is_pattern", "make_reserver"]

_GLOB = set("*?[")


def is_pattern(spec: str) -> bool:
    """Tell whether a queue spec is a glob pattern."""
    return any(ch in _GLOB for ch in spec)


class QueueSelection:
    """Resolve queue names and glob patterns into an ordered list of queue names."""

    def __init__(
        self,
        specs: Sequence[str],
        list_queues: Callable[[], list[str]],
        refresh: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.specs = tuple(specs)
        self.names_given = tuple(s for s in self.specs if not is_pattern(s))
        self.patterns = tuple(s for s in self.specs if is_pattern(s))
        self._list_queues = list_queues
        self._refresh = refresh
        self._clock = clock
        self._resolved: list[str] = list(self.names_given)
        self._next_refresh = 0.0

    def matches(self, queue: str) -> bool:
        """Tell whether `queue` is selected by a name or a pattern."""
        return queue in self.names_given or any(
            fnmatch.fnmatchcase(queue, p) for p in self.patterns
        )

    def invalidate(self) -> None:
        """Force the next `names()` to re-resolve patterns."""
        self._next_refresh = 0.0

    def note_wake(self, queue: str) -> None:
        """React to a wake-up from `queue` (a new queue matching a pattern: refresh)."""
        if queue not in self._resolved and self.matches(queue):
            self.invalidate()

    def names(self) -> list[str]:
        """Return the selected queue names in spec order (patterns expand alphabetically)."""
        if not self.patterns:
            return list(self.names_given)
        now = self._clock()
        if now >= self._next_refresh:
            known = sorted(self._list_queues())
            resolved: list[str] = []
            for spec in self.specs:
                if not is_pattern(spec):
                    candidates = [spec]
                else:
                    candidates = [q for q in known if fnmatch.fnmatchcase(q, spec)]
                for queue in candidates:
                    if queue not in resolved:
                        resolved.append(queue)
            self._resolved = resolved
            self._next_refresh = now + self._refresh
        return list(self._resolved)

    def wake_channels(self, keyspace: Keyspace = DEFAULT) -> tuple[list[str], list[str]]:
        """Return (channels, channel patterns) of `keyspace` that wake a worker for these
        queues (plain pub/sub; wakeup.py also handles sharded channels)."""
        return (
            [keyspace.channel(f"wake:{name}") for name in self.names_given],
            [keyspace.pattern(f"wake:{pattern}") for pattern in self.patterns],
        )


class Reserver:
    """Order the selected queues for each reserve call."""

    kind = "ordered"

    def __init__(self, selection: QueueSelection) -> None:
        self.selection = selection

    def order(self) -> list[str]:
        """Return the queues to try, in order, for the next reserve."""
        return self.selection.names()


class RoundRobinReserver(Reserver):
    """Start each reserve at the next queue, so every queue gets its turn first."""

    kind = "round-robin"

    def __init__(self, selection: QueueSelection) -> None:
        super().__init__(selection)
        self._start = 0

    def order(self) -> list[str]:
        names = self.selection.names()
        if not names:
            return names
        start = self._start % len(names)
        self._start = start + 1
        return names[start:] + names[:start]


class ShuffledReserver(Reserver):
    """Try the queues in a fresh random order on each reserve."""

    kind = "shuffled"

    def order(self) -> list[str]:
        names = self.selection.names()
        random.shuffle(names)
        return names


_KINDS: dict[str, type[Reserver]] = {
    "ordered": Reserver,
    "round-robin": RoundRobinReserver,
    "shuffled": ShuffledReserver,
}


def make_reserver(kind: str, selection: QueueSelection) -> Reserver:
    """Return a reserver of the named kind."""
    try:
        return _KINDS[kind](selection)
    except KeyError:
        raise ValueError(f"unknown reserver {kind!r}: use one of {', '.join(_KINDS)}") from None
