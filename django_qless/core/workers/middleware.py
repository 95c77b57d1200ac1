"""Around-perform middleware: `mw(job, call_next)` callables nested around the job target."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from django_qless.core.registry import Middleware

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["Middleware", "compose"]


def compose(
    middleware: Sequence[Middleware], job: Job, perform: Callable[[], Any]
) -> Callable[[], Any]:
    """Return a thunk running `perform` inside `middleware` (the first one is outermost)."""

    def call(index: int) -> Any:
        if index == len(middleware):
            return perform()
        return middleware[index](job, lambda: call(index + 1))

    return lambda: call(0)
