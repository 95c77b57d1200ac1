"""Act on many jobs in one round trip, reporting each refused jid with its reason."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .exceptions import QlessError
from .serialization import PRIORITY_MAX, PRIORITY_MIN, check_int, check_jids, check_name

if TYPE_CHECKING:
    from .client import Client
    from .job import Job

__all__ = ["BULK_MAX", "BulkResult", "cancel_bulk", "run_bulk"]

BULK_MAX = 500  # jids per batched call: one pipelined round trip, bounded memory

# What to do with one job: the engine call to send, or a refusal in plain words.
Plan = Callable[["Job"], "tuple[str, Sequence[Any]] | str"]


@dataclass
class BulkResult:
    """The jids an action changed, and those it refused with why (in the order given)."""

    done: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


def run_bulk(client: Client, jids: Sequence[str], plan: Plan) -> BulkResult:
    """Read the jobs in one call, then send every planned engine call in one pipeline."""
    wanted = list(dict.fromkeys(check_jids(list(jids), limit=BULK_MAX)))
    result = BulkResult()
    if not wanted:
        return result
    found = {job.jid: job for job in client.jobs.get_many(*wanted)}
    calls: list[tuple[str, Sequence[Any]]] = []
    sent: list[str] = []
    for jid in wanted:
        job = found.get(jid)
        step = plan(job) if job is not None else "it does not exist any more"
        if isinstance(step, str):
            result.refused[jid] = step
        else:
            calls.append(step)
            sent.append(jid)
    # raise_on_error=False: one job refused by the engine must not hide the others' outcome.
    replies = client.pipeline_calls(calls, raise_on_error=False) if calls else []
    for jid, reply in zip(sent, replies, strict=True):
        if isinstance(reply, QlessError):
            result.refused[jid] = str(reply)
        else:
            result.done.append(jid)
    return result


def retry_plan(job: Job) -> tuple[str, Sequence[Any]] | str:
    """Put a failed job back into its own queue."""
    if job.state != "failed":
        return f"it is {job.state}, not failed"
    if not job.queue_name:
        return "it has no queue to go back to"
    return ("put", job.put_args(job.queue_name))


def move_plan(queue: str, states: Sequence[str] | None) -> Plan:
    """Move jobs (in one of ``states``, when given) to ``queue``."""
    target = check_name("queue", queue)

    def plan(job: Job) -> tuple[str, Sequence[Any]] | str:
        if states is not None and job.state not in states:
            return f"it is {job.state}, so it can't be moved"
        return ("put", job.put_args(target))

    return plan


def priority_plan(priority: int, states: Sequence[str] | None) -> Plan:
    """Set the priority of jobs (in one of ``states``, when given)."""
    value = check_int("priority", priority, PRIORITY_MIN, PRIORITY_MAX)

    def plan(job: Job) -> tuple[str, Sequence[Any]] | str:
        if states is not None and job.state not in states:
            return f"it is {job.state}: a priority only orders jobs still waiting to run"
        return ("priority", (job.jid, str(value)))

    return plan


def track_plan(track: bool) -> Plan:
    """Track (or untrack) jobs; a job already in that state is refused as a no-op."""

    def plan(job: Job) -> tuple[str, Sequence[Any]] | str:
        if job.tracked == track:
            return "it is already tracked" if track else "it is not tracked"
        return ("track", ("track" if track else "untrack", job.jid))

    return plan


def cancel_bulk(client: Client, jids: Sequence[str]) -> BulkResult:
    """Cancel jobs in one engine call, leaving out those other (unselected) jobs depend on."""
    wanted = list(dict.fromkeys(check_jids(list(jids), limit=BULK_MAX)))
    result = BulkResult()
    if not wanted:
        return result
    found = {job.jid: job for job in client.jobs.get_many(*wanted)}
    for jid in wanted:
        if jid not in found:
            result.refused[jid] = "it does not exist any more"
    # The engine cancels all or none and refuses a job others still depend on: keep only
    # jobs whose dependents are all being canceled too (repeat, since leaving one out can
    # strand the jobs it depends on).
    chosen = dict.fromkeys(j for j in wanted if j in found)
    changed = True
    while changed:
        changed = False
        for jid in list(chosen):
            others = [d for d in found[jid].dependents if d not in chosen]
            if others:
                del chosen[jid]
                shown = ", ".join(others[:3]) + (", …" if len(others) > 3 else "")
                result.refused[jid] = f"other jobs depend on it ({shown})"
                changed = True
    if chosen:
        try:
            client.call("cancel", *chosen)
            result.done.extend(chosen)
        except QlessError as exc:  # a dependent appeared meanwhile: nothing was canceled
            result.refused.update(dict.fromkeys(chosen, str(exc)))
    return result
