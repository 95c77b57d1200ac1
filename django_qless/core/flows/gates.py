"""Flows across shards: gates that hold a member back until its parents in other shards
complete (docs/workflows.md, "Clusters").

qless dependencies live in one keyspace. A member whose parents include jobs of another
shard depends, in its own shard, on one *gate* per such parent: a placeholder job
`<member jid>-g<n>` scheduled ten years ahead in queue `qless-flow-gates`, which no worker
serves. The parent's flow record lists the gates it opens (`release`: [member, gate,
member's queue]). Right after the parent completes, whoever completed it (the worker, or
`Job.complete`) opens them: the member's dependency on the gate is dropped (`depends ...
off`: the engine moves the member to work once nothing else holds it, once only) and the
gate is canceled. Both steps are safe to repeat, so a member never runs twice. If the
completer dies in between, the lease reaper's sweep (`sweep_gates`) finds the gate with its
parent complete and opens it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..exceptions import QlessError
from ..serialization import MAX_DELAY
from .shapes import FLOW_KEY, Placed

if TYPE_CHECKING:
    from ..client import Client
    from ..cluster.sharded import ShardedClient
    from ..job import Job
    from ..types import QlessClient

__all__ = ["GATES_QUEUE", "GATE_KLASS", "SWEEP_IDLE_EVERY", "Spread", "open_gate",
           "release_after", "spread", "sweep_gates"]

log = logging.getLogger("django_qless")

GATES_QUEUE = "qless-flow-gates"
GATE_KLASS = "qless.FlowGate"
# While the worker is idle the sweep runs at most this often (a gate left behind is a
# completer's crash, rare; a busy worker sweeps at every reaper call).
SWEEP_IDLE_EVERY = 300.0
_SWEEP_BATCH = 500


class Spread:
    """A flow's members placed over keyspaces: for each member its keyspace's client, the
    gates it waits behind and the gates it opens."""

    def __init__(self, placed: Sequence[Placed], client_of: Callable[[str], Client]) -> None:
        self.client: dict[str, Client] = {p.jid: client_of(p.step.queue) for p in placed}
        self.gates: dict[str, list[tuple[str, str]]] = {}  # member -> [(gate, parent)]
        self.opens: dict[str, list[list[str]]] = {}  # parent -> [[member, gate, queue]]
        for item in placed:
            shard = self.client[item.jid].shard
            for index, parent in enumerate(item.parents):
                if self.client[parent].shard != shard:
                    gate = f"{item.jid}-g{index}"
                    self.gates.setdefault(item.jid, []).append((gate, parent))
                    self.opens.setdefault(parent, []).append([item.jid, gate, item.step.queue])

    @property
    def crosses(self) -> bool:
        """Tell whether any member waits on a parent in another keyspace."""
        return bool(self.gates)

    def depends(self, item: Placed) -> list[str]:
        """Return what `item` depends on in its keyspace: local parents, then its gates."""
        gated = {parent for _, parent in self.gates.get(item.jid, ())}
        return [p for p in item.parents if p not in gated] + \
            [gate for gate, _ in self.gates.get(item.jid, ())]

    def record(self, item: Placed) -> dict[str, Any]:
        """Return what `item`'s flow record adds: its gates, and the gates it opens."""
        extra: dict[str, Any] = {}
        if item.jid in self.gates:
            extra["gates"] = [gate for gate, _ in self.gates[item.jid]]
        if item.jid in self.opens:
            extra["release"] = self.opens[item.jid]
        return extra

    def gate_puts(self, item: Placed, flow_id: str) -> list[list[str]]:
        """Return the puts of `item`'s gates (in its keyspace, before it)."""
        queue = self.client[item.jid].queues[GATES_QUEUE]
        return [queue.put_args(GATE_KLASS, {"flow": flow_id, "parent": parent,
                                            "child": item.jid}, jid=gate, delay=MAX_DELAY)
                for gate, parent in self.gates.get(item.jid, ())]

    def shard_order(self, placed: Sequence[Placed]) -> list[str]:
        """Return the keyspaces in put order: those holding a first step (one that can run at
        once) last, so every gate exists before anything can complete."""
        shards: dict[str, bool] = {}
        for item in placed:
            shard = str(self.client[item.jid].shard)
            shards[shard] = shards.get(shard, False) or not item.parents
        return sorted(shards, key=lambda s: shards[s])


def spread(placed: Sequence[Placed], client_of: Callable[[str], Client]) -> Spread:
    """Place `placed` over the keyspaces of their queues."""
    return Spread(placed, client_of)


def open_gate(client: Client, member: str, gate: str) -> None:
    """Drop `member`'s dependency on `gate` and cancel the gate (both safe to repeat)."""
    try:
        client.call("depends", member, "off", gate)
    except QlessError:
        pass  # the member left `depends` already (released, canceled): the gate only
    client.jobs.cancel(gate)


def release_after(job: Job) -> None:
    """Open the gates a just-completed flow member holds for members in other shards; log
    errors, never raise them (the reaper's sweep opens what is left)."""
    router = job.client.router
    data = job.data
    record = data.get(FLOW_KEY) if isinstance(data, dict) else None
    if router is None or not isinstance(record, dict) or not record.get("release"):
        return
    for member, gate, queue in record["release"]:
        try:
            open_gate(router.for_queue(queue), member, gate)
        except Exception as exc:  # noqa: BLE001 - a completed job stays completed
            log.warning("flow member %s: could not release %s (%s); the reaper's sweep will",
                        job.jid, member, exc)


_swept_at: list[float] = []  # when this process last swept (monotonic), if it has


def sweep_gates(deployment: QlessClient, *, idle: bool = False) -> list[str]:
    """Open every gate whose parent completed (what a completer that died left behind);
    return the members released. Every reaper call while busy; while idle at most every
    SWEEP_IDLE_EVERY seconds per process. Log errors, never raise them."""
    now = time.monotonic()
    if idle and _swept_at and now - _swept_at[0] < SWEEP_IDLE_EVERY:
        return []
    clients: list[Client] = deployment.clients()
    if len(clients) < 2 or not hasattr(deployment, "locate"):
        return []  # one keyspace: no gates
    sharded = cast("ShardedClient", deployment)
    _swept_at[:] = [now]
    released: list[str] = []
    try:
        for client in clients:
            released += _sweep_shard(sharded, client)
    except Exception as exc:  # noqa: BLE001 - a sweep must never stop a worker
        log.warning("flows: sweeping gates failed (%s); retrying at the next reaper call", exc)
    if released:
        log.info("flows: released %d member(s) whose parent completed in another shard: %s",
                 len(released), ", ".join(released[:10]))
    return released


def _sweep_shard(deployment: ShardedClient, client: Client) -> list[str]:
    """Open the gates of `client`'s shard whose parent is complete."""
    gate_jids = client.queues[GATES_QUEUE].jobs.scheduled(0, _SWEEP_BATCH)
    if not gate_jids:
        return []
    gates = {g.jid: g.data for g in client.jobs.get_many(*gate_jids)
             if isinstance(g.data, Mapping)}
    parents = sorted({str(d["parent"]) for d in gates.values() if d.get("parent")})
    done = _complete(deployment, parents)
    released = []
    for gate, data in gates.items():
        if data.get("parent") in done:
            open_gate(client, str(data["child"]), gate)
            released.append(str(data["child"]))
    return released


def _complete(deployment: ShardedClient, jids: Sequence[str]) -> set[str]:
    """Return which of `jids` are complete, wherever they live (a jid found nowhere is not:
    a member never runs unless its parents were seen complete)."""
    by_shard: dict[str, list[str]] = {}
    for jid, tag in deployment.locate(jids).items():
        by_shard.setdefault(tag, []).append(jid)
    return {job.jid for tag, found in by_shard.items()
            for job in deployment.shard(tag).jobs.get_many(*found) if job.state == "complete"}
