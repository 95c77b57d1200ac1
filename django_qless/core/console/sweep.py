"""Act on every job a listing matches (a queue's state, or a failure group with filters),
one bounded batch per step, resuming from a position the caller keeps.

A step reads at most ``batch`` jids (a failure group: at most ``FAILED_SCAN`` entries) and
sends one batched core call (``cancel_many``, ``retry_many``, ``move_many``,
``set_priority_many``). Jobs the action takes out of the listing shift the later ones up, so
the next position is the old one plus the jobs that stayed (refused, or still listed after
the action). Jobs that move in the listing meanwhile (popped, put, reprioritised) may be
read twice or missed; the caller's final count says what is left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..bulk import BULK_MAX, BulkResult
from ..exceptions import InvalidArgument
from ..serialization import check_int, check_name, check_text

if TYPE_CHECKING:
    from ..client import Client

__all__ = ["ACTIONS", "FAILED_SCAN", "LISTED_STATES", "Selection", "SweepStep", "sweep_step"]

ACTIONS = ("retry", "cancel", "move", "priority")
LISTED_STATES = ("running", "waiting", "scheduled", "stalled", "depends", "throttled")
FAILED_SCAN = 5000  # failure-group entries read per step
PRIORITY_STATES = ("waiting", "scheduled", "depends", "stalled", "throttled")
MOVABLE = (*PRIORITY_STATES, "running", "failed")


@dataclass(frozen=True)
class Selection:
    """The jobs a listing shows: a queue's ``state`` tab, or a failure ``group`` (filtered
    by ``queue`` and a failure-time window [since, until))."""

    queue: str | None = None
    state: str | None = None
    group: str | None = None
    since: float | None = None
    until: float | None = None

    def __post_init__(self) -> None:
        if self.group is not None:
            check_text("group", self.group, 256)
            if self.queue is not None:
                check_name("queue", self.queue)
        elif self.queue is None or self.state not in LISTED_STATES:
            raise InvalidArgument("a selection is a queue and one of its states "
                                  f"({', '.join(LISTED_STATES)}), or a failure group")
        else:
            check_name("queue", self.queue)


@dataclass
class SweepStep:
    """What one step did, and where the next one starts (None: the listing was read)."""

    result: BulkResult = field(default_factory=BulkResult)
    position: int | None = 0


def _stays(selection: Selection, action: str, target: str | None) -> bool:
    """Tell whether a job the action changed is still in the listing afterwards."""
    if action == "priority":
        return True
    return action == "move" and selection.group is None and target == selection.queue


def _act(client: Client, jids: Sequence[str], action: str, target: str | None,
         priority: int | None) -> BulkResult:
    jobs = client.jobs
    if action == "cancel":
        return jobs.cancel_many(jids)
    if action == "retry":
        return jobs.retry_many(jids)
    if action == "move":
        return jobs.move_many(jids, str(target), states=MOVABLE)
    return jobs.set_priority_many(jids, int(priority or 0), states=PRIORITY_STATES)


def sweep_step(client: Client, selection: Selection, action: str, *, position: int = 0,
               batch: int = BULK_MAX, queue: str | None = None,
               priority: int | None = None) -> SweepStep:
    """Apply ``action`` (retry, cancel, move to ``queue``, set ``priority``) to the next
    ``batch`` jobs of ``selection`` from ``position``; return the outcome and where to go on."""
    if action not in ACTIONS:
        raise InvalidArgument(f"unknown action {action!r}: one of {', '.join(ACTIONS)}")
    if action == "move":
        queue = check_name("queue", str(queue or ""))
    if action == "priority" and priority is None:
        raise InvalidArgument("a priority is needed")
    position = check_int("position", position, 0)
    count = check_int("batch", batch, 1, BULK_MAX)
    end: int | None
    if selection.group is not None:
        page = client.jobs.failed_matching(
            selection.group, queue=selection.queue, since=selection.since,
            until=selection.until, cursor=position, count=count, scan=FAILED_SCAN)
        jids = [job.jid for job in page["jobs"]]
        end = page["next"]
    else:
        lister = getattr(client.queues[str(selection.queue)].jobs, str(selection.state))
        jids = list(lister(offset=position, count=count))
        end = position + len(jids) if len(jids) == count else None
    step = SweepStep(position=end)
    if jids:
        step.result = _act(client, jids, action, queue, priority)
    if end is not None and not _stays(selection, action, queue):
        step.position = end - len(step.result.done)  # those left the listing
    return step
