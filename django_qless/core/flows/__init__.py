"""Workflows on qless dependencies: chains, groups and chords of steps, put in one round trip.

A flow is a tree of `Step` (one job), `Chain` (each part after the one before succeeds) and
`Group` (parts that run together). `chord(group, callback)` is a chain of a group and a step.
Putting a flow gives every step a jid `<flow id>-<n>` and puts every job in one pipelined
round trip, each with `depends` on the steps it follows, so the engine releases a step when
all of them complete; nothing in the engine is specific to flows. Across the shards of a
`ShardedClient` the puts are one round trip per shard, and a step waiting on a step of
another shard waits behind a gate in its own shard (gates.py).

Each member's data carries ``FLOW_KEY``: ``{"id": <flow id>, "parents": [jids], "gather":
bool, "pass": bool}``. ``parents`` are the steps it waits for, ``gather`` says they were a
group (the step receives a list), ``pass`` that the step wants their results. A step's
result is what its job stored under ``RESULT_KEY`` in its data before completing (the
Django runner stores return values there); `received(job)` reads the parents' results in
one call. The flow id ends in the number of members, so `Flows.get` reads the whole flow
with one multi-get (per shard holding members) and no record of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import integrations
from ..exceptions import InvalidArgument, QlessError
from ..put_many import check_utf8
from ..serialization import check_klass, check_name
from .gates import spread
from .shapes import (
    FLOW_KEY,
    MAX_MEMBERS,
    STEP_OPTIONS,
    Chain,
    Group,
    Node,
    Placed,
    Step,
    chain,
    chord,
    group,
    member_ids,
    new_flow_id,
    plan,
)

if TYPE_CHECKING:
    from ..client import Client
    from ..job import Job
    from ..types import QlessClient

__all__ = [
    "FLOW_KEY", "MAX_MEMBERS", "RESULT_KEY", "Chain", "FlowMember", "FlowState", "Flows",
    "Group", "Node", "Placed", "Step", "chain", "chord", "flow_of", "group", "member_ids",
    "new_flow_id", "parent_results", "plan", "received",
]

RESULT_KEY = "result"
# Between the puts of one flow (as between the calls of a pipeline).
_STAGGER = 1e-6


@dataclass(frozen=True)
class FlowMember:
    """One member as read now: None state means it is gone (canceled or expired)."""

    jid: str
    klass: str
    queue: str
    state: str | None
    parents: tuple[str, ...]
    result: Any = None
    failure: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class FlowState:
    """A flow's members and its status: complete, running, "failed at <jid>", or canceled
    (some members gone)."""

    id: str
    members: tuple[FlowMember, ...]
    status: str
    ends: tuple[str, ...]
    gathered: bool

    @property
    def failed(self) -> list[FlowMember]:
        """Return the members that failed."""
        return [m for m in self.members if m.state == "failed"]

    def result(self) -> Any:
        """Return the flow's result: its last step's, or a list when it ends with a group."""
        by_jid = {m.jid: m for m in self.members}
        values = [by_jid[j].result if j in by_jid else None for j in self.ends]
        if self.gathered:
            return values
        return values[0] if values else None


class Flows:
    """Put, read, retry and cancel flows (`client.flows`)."""

    def __init__(self, client: QlessClient) -> None:
        self.client = client

    def put(self, flow: Node, *, flow_id: str | None = None) -> str:
        """Put every member of `flow` (one round trip per keyspace); return the flow id.

        Everything is checked before anything is sent. On a `ShardedClient` members may live
        in queues of different shards: a member waiting on a parent of another shard waits
        behind a gate in its own shard (gates.py). `flow_id` (from `new_flow_id`) lets a
        caller know the member jids before the put.
        """
        placed, ends, gathered = plan(flow, flow_id)
        flow_id = placed[0].jid.rpartition("-")[0]
        for item in placed:
            check_name("queue", item.step.queue)
        where = spread(placed, self._for_queue)
        puts: dict[str, list[list[str]]] = {}
        for item in placed:
            client = where.client[item.jid]
            puts.setdefault(str(client.shard), []).extend([
                *where.gate_puts(item, flow_id),
                _put_args(client, item, flow_id, ends, gathered, where.depends(item),
                          where.record(item))])
        sent: list[tuple[Client, list[str]]] = []
        for shard in where.shard_order(placed):
            target = next(c for c in where.client.values() if str(c.shard) == shard)
            now = target.now()
            # The arguments are validated text already: send them as they are, each put a
            # microsecond after the one before so the members keep their order.
            replies = target.channel.invoke_many(
                [("put", repr(now + index * _STAGGER), *args)
                 for index, args in enumerate(puts[shard])])
            sent.append((target, [args[2] for args in puts[shard]]))
            refused = [reply for reply in replies if isinstance(reply, QlessError)]
            if refused:
                # Refused midway (after the checks here passed): take back what was put.
                for client, jids in sent:
                    self._cancel(client, jids)
                raise refused[0]
        return flow_id

    def _for_queue(self, queue: str) -> Client:
        """Return the client of `queue`'s keyspace (asking the deployment from a shard)."""
        router = getattr(self.client, "router", None)
        owner = router if router is not None else self.client
        client: Client = owner.for_queue(queue)
        return client

    def _keyspaces(self) -> list[Client]:
        """Return every keyspace client of the deployment."""
        router = getattr(self.client, "router", None)
        owner = router if router is not None and hasattr(router, "clients") else self.client
        clients: list[Client] = owner.clients()
        return clients

    def _found(self, flow_id: str) -> list[tuple[Client, list[Job]]]:
        """Return each keyspace holding members of the flow, with the members found there
        (across shards: one look-up per primary, then one multi-get per shard)."""
        jids = member_ids(flow_id)
        # (the ShardedClient a shard's Client belongs to, if any)
        router: Any = getattr(self.client, "router", None) or self.client
        if hasattr(router, "locate"):
            by_shard: dict[str, list[str]] = {}
            for jid, tag in router.locate(jids).items():
                by_shard.setdefault(tag, []).append(jid)
            return [(router.shard(tag), router.shard(tag).jobs.get_many(*found))
                    for tag, found in by_shard.items()]
        for client in self._keyspaces():
            jobs = client.jobs.get_many(*jids)
            if jobs:
                return [(client, jobs)]
        return []

    def get(self, flow_id: str) -> FlowState | None:
        """Return the flow's state (one multi-get in each keyspace holding members), None if
        no member is left."""
        jids = member_ids(flow_id)
        by_jid = {job.jid: job for _, found in self._found(flow_id) for job in found}
        if not by_jid:
            return None
        members = []
        ends: tuple[str, ...] = ()
        gathered = False
        for jid in jids:
            job = by_jid.get(jid)
            if job is None:
                members.append(FlowMember(jid, "", "", None, ()))
                continue
            record = flow_of(job) or {}
            if record.get("ends"):
                ends, gathered = tuple(record["ends"]), bool(record.get("gathered"))
            data = job.data if isinstance(job.data, dict) else {}
            members.append(FlowMember(
                jid, job.klass_name, job.queue_name or _last_queue(job), job.state,
                tuple(record.get("parents", ())),
                data.get(RESULT_KEY) if job.state == "complete" else None,
                job.failure or None))
        return FlowState(flow_id, tuple(members), _status(members), ends, gathered)

    def retry(self, flow_id: str) -> list[str]:
        """Put every failed member back into its queue (the flow resumes); return their jids."""
        retried: list[str] = []
        for client, found in self._found(flow_id):
            failed = [job.jid for job in found if job.state == "failed"]
            retried += client.jobs.retry_many(failed).done if failed else []
        return retried

    def cancel(self, flow_id: str) -> list[str]:
        """Cancel every member not complete (and the gates they wait behind), one engine call
        per keyspace; return the member jids canceled."""
        canceled: list[str] = []
        for client, found in self._found(flow_id):
            left = [job for job in found if job.state != "complete"]
            gates = [str(g) for job in left for g in (flow_of(job) or {}).get("gates", ())]
            jids = [job.jid for job in left]
            done = set(self._cancel(client, [*jids, *gates]))
            canceled += [jid for jid in jids if jid in done]
        return canceled

    @staticmethod
    def _cancel(client: Client, jids: Sequence[str]) -> list[str]:
        """Cancel `jids` together: dependents go with what they depend on, as the engine
        requires."""
        return client.jobs.cancel(*jids) if jids else []


def _put_args(client: Client, item: Placed, flow_id: str, ends: Sequence[str],
              gathered: bool, depends: Sequence[str], extra: Mapping[str, Any]) -> list[str]:
    """Validate one member's put and return its arguments."""
    step = item.step
    check_klass(step.klass)
    unknown = set(step.options) - STEP_OPTIONS
    if unknown:
        raise InvalidArgument(f"step {step.klass}: a flow step takes only "
                              f"{sorted(STEP_OPTIONS)}, got {sorted(unknown)}")
    if not isinstance(step.data, Mapping) or FLOW_KEY in step.data:
        raise InvalidArgument(f"step {step.klass}: data must be a dict without {FLOW_KEY!r}")
    record: dict[str, Any] = {"id": flow_id, "parents": item.parents, "gather": item.gather,
                              "pass": step.receive, **extra}
    if item.jid == f"{flow_id}-0":
        # The first member says how the flow ends, so a read of the flow knows its result.
        record.update(ends=list(ends), gathered=gathered)
    data: Mapping[str, Any] = {**step.data, FLOW_KEY: record}
    queue = client.queues[step.queue]
    if integrations.put_middleware():
        # Installed instrumentation sees each member's put and may add propagation
        # headers to its data; the puts are sent together afterwards.
        pending = integrations.PendingPut(queue, check_klass(step.klass), item.jid, data)
        sent: list[Mapping[str, Any]] = []

        def keep(given: Mapping[str, Any]) -> str:
            sent.append(given)
            return item.jid

        integrations.around_put(pending, keep)
        data = sent[0] if sent else data
    args = queue.put_args(step.klass, data, jid=item.jid, depends=depends,
                          **dict(step.options))
    if not "".join(args).isascii():
        for arg in args:
            check_utf8(arg)
    return args


def _last_queue(job: Job) -> str:
    """Return the queue a finished job was last put in (a complete job has none)."""
    for entry in reversed(job.history):
        if entry.get("q"):
            return str(entry["q"])
    return ""


def _status(members: Sequence[FlowMember]) -> str:
    """Say where a flow stands from its members' states."""
    for member in members:
        if member.state == "failed":
            return f"failed at {member.jid}"
    if any(m.state is None for m in members):
        return "canceled"
    if all(m.state == "complete" for m in members):
        return "complete"
    return "running"


def flow_of(job: Job) -> dict[str, Any] | None:
    """Return the flow record in a job's data, or None for a job outside any flow."""
    data = job.data
    record = data.get(FLOW_KEY) if isinstance(data, dict) else None
    return record if isinstance(record, dict) else None


def parent_results(job: Job) -> list[Any]:
    """Return the results of the steps `job` waited for, in order (one multi-get).

    Raises QlessError if a parent is gone (its completed job expired from history).
    """
    record = flow_of(job)
    parents = [str(j) for j in (record or {}).get("parents", ())]
    if not parents:
        return []
    found = {p.jid: p for p in job.client.jobs.get_many(*parents)}
    router = job.client.router
    if len(found) < len(parents) and router is not None:
        # Parents in other shards (a flow across shards): one look-up per primary.
        elsewhere: dict[str, list[str]] = {}
        for jid, tag in router.locate([p for p in parents if p not in found]).items():
            elsewhere.setdefault(tag, []).append(jid)
        for tag, jids in elsewhere.items():
            found.update((p.jid, p) for p in router.shard(tag).jobs.get_many(*jids))
    out = []
    for jid in parents:
        parent = found.get(jid)
        if parent is None:
            raise QlessError(f"job {job.jid}: the step it follows ({jid}) is gone, so its "
                             f"result cannot be read (completed jobs expire from history)")
        data = parent.data
        out.append(data.get(RESULT_KEY) if isinstance(data, dict) else None)
    return out


def received(job: Job) -> list[Any]:
    """Return what a step receiving its parents' results gets as leading arguments: [] when
    it takes none, [value] after a step, [[values...]] after a group."""
    record = flow_of(job)
    if not record or not record.get("pass") or not record.get("parents"):
        return []
    results = parent_results(job)
    return [results] if record.get("gather") else [results[0]]

