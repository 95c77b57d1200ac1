"""Empty a queue that holds jobs: count what would go, then cancel it in bounded batches.

Every step is a few bounded engine calls (about ``batch`` jobs canceled, never more than
``BULK_MAX``; at most ``FAILED_SCAN`` failure-group entries read), so an operator's request
or a CLI loop never sends one unbounded call. A step returns an ``EmptyCursor`` to pass to
the next one; the queue is empty when a step reports ``done``.

Running jobs are canceled like the others: the engine tells their workers on
``ql:w:<worker>`` (a ``canceled`` event), and they abandon the job. A job that a job of
another queue depends on is kept (the engine refuses to cancel it, and canceling the other
queue's job is not ours to do); it is listed in ``kept`` with why.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..bulk import BULK_MAX
from ..exceptions import InvalidArgument, QlessError
from ..serialization import as_list, check_int, check_jid, check_name

if TYPE_CHECKING:
    from ..client import Client
    from ..job import Job

__all__ = [
    "CANCEL_ORDER",
    "FAILED_SCAN",
    "KEPT_MAX",
    "EmptyCursor",
    "EmptyStep",
    "QueueContents",
    "count_contents",
    "empty_step",
]

# Dependents before what they depend on: the engine refuses to cancel a job whose
# dependents are not canceled with it.
CANCEL_ORDER = ("depends", "throttled", "scheduled", "stalled", "waiting", "running")
FAILED_SCAN = 5000  # failure-group entries read per step (failed jobs are indexed by group)
KEPT_MAX = 500  # jobs kept because other queues need them, carried from step to step
_PAGE = 500  # jids per listing call
_EXTEND_ROUNDS = 20  # levels of same-queue dependents a batch takes in


@dataclass(frozen=True)
class QueueContents:
    """What emptying a queue would remove, by state; ``failed_capped``: failed is a lower
    bound (the failure groups were read only up to the scan cap)."""

    counts: dict[str, int]
    failed_capped: bool = False

    @property
    def total(self) -> int:
        """Return how many jobs and recurring templates would go."""
        return sum(self.counts.values())


@dataclass
class EmptyCursor:
    """Where a later step resumes: each failure group's read position (-1: read to its
    end) and the jids kept because jobs of other queues depend on them."""

    groups: dict[str, int] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)

    def dumps(self) -> str:
        """Return the cursor as compact JSON (for a form field or a CLI loop)."""
        return json.dumps({"groups": self.groups, "kept": self.kept}, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> EmptyCursor:
        """Read a cursor written by ``dumps``; raise InvalidArgument on anything else."""
        try:
            raw = json.loads(text) if text else {}
            groups = {str(g): int(p) for g, p in dict(raw.get("groups") or {}).items()}
            kept = {check_jid(str(j)): str(why)[:300]
                    for j, why in dict(raw.get("kept") or {}).items()}
        except (ValueError, TypeError, AttributeError) as exc:
            raise InvalidArgument(f"not a queue-emptying cursor: {exc}") from None
        if len(kept) > KEPT_MAX or len(groups) > 100_000 or min(groups.values(), default=0) < -1:
            raise InvalidArgument("not a queue-emptying cursor")
        return cls(groups, kept)


@dataclass
class EmptyStep:
    """What one step did: jobs canceled by state, recurring templates removed, the cursor
    for the next step, and whether the queue is now empty (but for kept jobs)."""

    canceled: dict[str, int] = field(default_factory=dict)
    unrecurred: int = 0
    cursor: EmptyCursor = field(default_factory=EmptyCursor)
    done: bool = False

    @property
    def removed(self) -> int:
        """Return how many jobs and templates this step removed."""
        return sum(self.canceled.values()) + self.unrecurred


def _failed_jids(client: Client, name: str, cursor: EmptyCursor, room: int,
                 skip: Mapping[str, str]) -> tuple[dict[str, str], bool]:
    """Return up to ``room`` failed jids of queue ``name`` (jid -> group) from the groups'
    positions in ``cursor`` (advanced in place), and whether every group was read."""
    found: dict[str, str] = {}
    budget = FAILED_SCAN
    for group in sorted(client.jobs.failed()):
        position = cursor.groups.get(group, 0)
        if position < 0:
            continue
        if room <= len(found) or budget <= 0:
            return found, False
        page = client.jobs.failed_matching(group, queue=name, cursor=position,
                                           count=min(room - len(found), 500), scan=budget)
        for job in page["jobs"]:
            if job.jid not in skip:
                found[job.jid] = group
        stop = page["next"]
        budget -= (stop if stop is not None else page["total"]) - position
        cursor.groups[group] = -1 if stop is None else stop
    return found, room > len(found) and budget > 0


def _state_jids(client: Client, name: str, state: str, room: int,
                skip: Mapping[str, str]) -> list[str]:
    """Return up to ``room`` jids of ``name`` in ``state``, skipping kept ones."""
    lister = getattr(client.queues[name].jobs, state)
    found: list[str] = []
    offset = 0
    while len(found) < room:
        page = list(lister(offset=offset, count=_PAGE))
        found.extend(j for j in page if j not in skip)
        if len(page) < _PAGE:
            break
        offset += _PAGE
    return found[:room]


def _choose(client: Client, name: str, jids: Sequence[str], kept: dict[str, str]
            ) -> dict[str, Job]:
    """Return the jobs among ``jids`` the engine will cancel together. The batch first takes
    in the queue's own jobs that depend on them (up to BULK_MAX jobs, so a chain longer than
    a batch still goes); a job another queue's job depends on is kept; a job whose same-queue
    dependent did not fit waits for a later step."""
    jobs = {job.jid: job for job in client.jobs.get_many(*jids)} if jids else {}
    homes: dict[str, str] = {}
    for _ in range(_EXTEND_ROUNDS):
        outside = {d for job in jobs.values() for d in job.dependents
                   if d not in jobs and d not in homes}
        if not outside:
            break
        extra = client.jobs.get_many(*outside)
        homes.update({job.jid: job.queue_name for job in extra})
        own = [job for job in extra if job.queue_name == name and job.jid not in kept]
        room = BULK_MAX - len(jobs)
        if not own or room <= 0:
            break
        jobs.update({job.jid: job for job in own[:room]})
    changed = True
    while changed:
        changed = False
        for jid, job in list(jobs.items()):
            others = [d for d in job.dependents if d not in jobs]
            if not others:
                continue
            del jobs[jid]
            changed = True
            foreign = [d for d in others if homes.get(d, name) != name]
            if foreign and len(kept) < KEPT_MAX:
                kept[jid] = f"jobs of other queues depend on it ({', '.join(foreign[:3])})"
    return jobs


def empty_step(client: Client, name: str, *, batch: int = BULK_MAX,
               cursor: EmptyCursor | None = None) -> EmptyStep:
    """Cancel up to ``batch`` jobs of queue ``name`` (recurring templates first, then its
    jobs by state, dependents first, then its failed jobs) and say where to resume; the
    queue's own jobs depending on those are taken along, up to BULK_MAX in all."""
    check_name("queue", name)
    room = check_int("batch", batch, 1, BULK_MAX)
    step = EmptyStep(cursor=cursor or EmptyCursor())
    kept = step.cursor.kept
    templates = _state_jids(client, name, "recurring", room, kept)
    if templates:
        replies = client.pipeline_calls([("unrecur", (j,)) for j in templates],
                                        raise_on_error=False)
        step.unrecurred = sum(1 for r in replies if not isinstance(r, QlessError))
        room -= len(templates)
    wanted: dict[str, str] = {}
    for state in CANCEL_ORDER:
        if room <= len(wanted):
            break
        for jid in _state_jids(client, name, state, room - len(wanted), kept):
            wanted.setdefault(jid, state)
    failed_done = False
    found: dict[str, str] = {}
    if room > len(wanted):
        found, failed_done = _failed_jids(client, name, step.cursor, room - len(wanted), kept)
        wanted.update(dict.fromkeys(found, "failed"))
    chosen = _choose(client, name, list(wanted), kept)
    if chosen:
        try:
            canceled = as_list(client.call("cancel", *chosen))
        except QlessError:  # a dependent appeared meanwhile: nothing canceled, try again
            canceled = []
        for jid in canceled:
            state = wanted.get(jid) or (chosen[jid].state if jid in chosen else "waiting")
            step.canceled[state] = step.canceled.get(state, 0) + 1
        _rewind(step.cursor, canceled, found)
    elif wanted and not templates:
        # Nothing could go, yet jobs remain: each waits on a job kept above; keep them too.
        for jid in wanted:
            if len(kept) < KEPT_MAX:
                kept.setdefault(jid, "it depends on jobs that are kept")
    step.done = not templates and not wanted and failed_done
    return step


def _rewind(cursor: EmptyCursor, canceled: Sequence[str], groups: Mapping[str, str]) -> None:
    """Move each failure group's read position back by its entries canceled (they were all
    read before that position, and a canceled job leaves its group)."""
    for jid in canceled:
        group = groups.get(jid)
        if group is not None and cursor.groups.get(group, 0) > 0:
            cursor.groups[group] -= 1


def count_contents(client: Client, name: str, *, scan: int = FAILED_SCAN * 4) -> QueueContents:
    """Count what ``empty_step`` would remove from ``name``: the engine's per-state counts,
    and its failed jobs found in the failure groups (reading at most ``scan`` entries)."""
    check_name("queue", name)
    counts = {s: 0 for s in (*CANCEL_ORDER, "recurring", "failed")}
    reply: Any = client.queues[name].counts
    for state in counts:
        if state != "failed" and isinstance(reply, Mapping):
            counts[state] = int(reply.get(state) or 0)
    budget = check_int("scan", scan, 1, 1_000_000)
    capped = False
    for group in sorted(client.jobs.failed()):
        position = 0
        while position is not None:
            if budget <= 0:
                capped = True
                break
            page = client.jobs.failed_matching(group, queue=name, cursor=position,
                                               count=500, scan=budget)
            counts["failed"] += len(page["jobs"])
            stop = page["next"]
            budget -= (stop if stop is not None else page["total"]) - position
            position = stop
        if capped:
            break
    return QueueContents(counts, capped)
