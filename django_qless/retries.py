"""Retry policies of ``@job(retry_on=...)``: the backoff and the priority of a retried job."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from django_qless.core.serialization import PRIORITY_MAX, PRIORITY_MIN, check_int

__all__ = ["Backoff", "RetryPolicy", "RetryPriority"]


@dataclass(frozen=True)
class Backoff:
    """How long to wait before attempt N+1: fixed or exponential, optionally jittered."""

    base: float = 10.0
    factor: float = 1.0
    maximum: float = 3600.0
    jitter: bool = False

    @classmethod
    def fixed(cls, seconds: float, *, jitter: bool = False) -> Backoff:
        """Wait the same number of seconds before every retry."""
        return cls(base=seconds, factor=1.0, maximum=seconds, jitter=jitter)

    @classmethod
    def exponential(cls, base: float = 5.0, factor: float = 2.0, maximum: float = 3600.0, *,
                    jitter: bool = True) -> Backoff:
        """Wait base, base*factor, base*factor**2 ... seconds, capped at maximum."""
        return cls(base=base, factor=factor, maximum=maximum, jitter=jitter)

    def delay(self, attempt: int) -> float:
        """Return the delay after failed attempt number ``attempt`` (1-based)."""
        value = min(self.maximum, self.base * self.factor ** max(0, attempt - 1))
        if self.jitter:
            # "Full jitter": spread retries of jobs that failed together.
            value = random.uniform(0, value)
        return max(0.0, value)


# The priority a retried job waits with: a fixed one, or f(current priority, attempt).
RetryPriority = int | Callable[[int, int], int]


@dataclass(frozen=True)
class RetryPolicy:
    """Retry on the named exceptions (while the job has retries left) after a backoff."""

    on: tuple[type[BaseException], ...]
    backoff: Backoff = Backoff.exponential()
    priority: RetryPriority | None = None

    def __post_init__(self) -> None:
        if self.priority is not None and not callable(self.priority):
            check_int("retry_priority", self.priority, PRIORITY_MIN, PRIORITY_MAX)

    def matches(self, exc: BaseException) -> bool:
        """Return whether ``exc`` should be retried."""
        return bool(self.on) and isinstance(exc, self.on)

    def priority_for(self, current: int, attempt: int) -> int | None:
        """Return the priority the retried job waits with (None: keep its own)."""
        if self.priority is None or not callable(self.priority):
            return self.priority
        value = self.priority(current, attempt)
        return check_int("retry_priority() result", value, PRIORITY_MIN, PRIORITY_MAX)
