"""The errors the Django side raises about jobs: bad arguments, results not there."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django_qless.core.exceptions import InvalidArgument

__all__ = ["InvalidJobArgument", "JobFailedError", "ResultNotReady", "ResultTimeout"]


class InvalidJobArgument(InvalidArgument, TypeError):
    """An enqueue argument has the wrong type or is not JSON.

    An ``InvalidArgument`` like every other refused argument, and still a ``TypeError`` for
    code written against the first releases.
    """


class ResultNotReady(LookupError):
    """The job has not completed (yet), so it has no return value."""


class ResultTimeout(ResultNotReady, TimeoutError):
    """``result(timeout=...)`` waited the time given and the job had not finished."""


class JobFailedError(Exception):
    """The job failed; ``failure`` holds qless's failure record."""

    def __init__(self, jid: str, failure: Mapping[str, Any]) -> None:
        self.jid = jid
        self.failure = dict(failure)
        super().__init__(f"job {jid} failed: {failure.get('group')}: "
                         f"{str(failure.get('message', ''))[:200]}")
