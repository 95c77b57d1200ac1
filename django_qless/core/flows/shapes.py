"""The shapes of a flow (steps, chains, groups) and the plan that gives each step its jid
and the steps it waits for (see flows.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import InvalidArgument
from ..serialization import check_jid, new_jid

__all__ = [
    "FLOW_KEY", "MAX_MEMBERS", "STEP_OPTIONS", "Chain", "Group", "Node", "Placed", "Step",
    "chain", "check_node", "chord", "group", "member_ids", "new_flow_id", "plan",
]

FLOW_KEY = "qless_flow"
# Members of one flow: every put goes in one pipeline, and a step's depends holds at most
# 1000 jids.
MAX_MEMBERS = 1000
# Put options a step may carry (delay, jid and unique make no sense inside a flow).
STEP_OPTIONS = frozenset({"priority", "tags", "retries", "throttles"})


@dataclass(frozen=True)
class Step:
    """One job of a flow: its class, data, queue and put options; `receive` asks for the
    results of the steps it follows."""

    klass: str
    data: Mapping[str, Any]
    queue: str
    options: Mapping[str, Any] = field(default_factory=dict)
    receive: bool = False


@dataclass(frozen=True)
class Chain:
    """Parts run one after another, each once the one before succeeded."""

    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Group:
    """Parts that run together; what follows a group waits for all of them."""

    parts: tuple[Node, ...]


Node = Step | Chain | Group


def check_node(value: object, where: str) -> Node:
    """Refuse anything but a step, a chain or a group."""
    if not isinstance(value, Step | Chain | Group):
        raise InvalidArgument(f"{where} must be a step, a chain or a group, got "
                              f"{type(value).__name__} {value!r:.80}")
    return value


def chain(*parts: Node) -> Chain:
    """Return a chain of `parts` (steps, chains or groups), at least one."""
    if not parts:
        raise InvalidArgument("a chain needs at least one step")
    return Chain(tuple(check_node(p, f"chain part {i}") for i, p in enumerate(parts)))


def group(*parts: Node) -> Group:
    """Return a group of `parts` that run together, at least one."""
    if len(parts) == 1 and isinstance(parts[0], list | tuple):
        parts = tuple(parts[0])  # group([a, b]) as well as group(a, b)
    if not parts:
        raise InvalidArgument("a group needs at least one step")
    return Group(tuple(check_node(p, f"group part {i}") for i, p in enumerate(parts)))


def chord(header: Group, callback: Node) -> Chain:
    """Return `callback` after every part of `header`, receiving all their results."""
    if not isinstance(header, Group):
        raise InvalidArgument(f"a chord's header must be a group, got {type(header).__name__}")
    return chain(header, check_node(callback, "a chord's callback"))


@dataclass
class Placed:
    """One step with its jid and the jids it waits for."""

    jid: str
    step: Step
    parents: list[str]
    gather: bool


def _place(node: Node, parents: list[str], gather: bool, out: list[Placed],
           flow_id: str) -> tuple[list[str], bool]:
    """Give each step of `node` a jid after `parents`; return its last jids and whether
    they are a group's."""
    if isinstance(node, Step):
        jid = f"{flow_id}-{len(out)}"
        out.append(Placed(jid, node, list(parents), gather))
        return [jid], False
    if isinstance(node, Chain):
        for part in node.parts:
            parents, gather = _place(part, parents, gather, out, flow_id)
        return parents, gather
    ends: list[str] = []
    for part in node.parts:
        ends += _place(part, parents, gather, out, flow_id)[0]
    return ends, True


def _count(node: Node) -> int:
    """Return how many steps `node` holds."""
    if isinstance(node, Step):
        return 1
    if not node.parts:
        raise InvalidArgument(f"an empty {type(node).__name__.lower()} has nothing to run")
    return sum(_count(p) for p in node.parts)


def new_flow_id(flow: Node) -> str:
    """Return a fresh id for `flow` (checked): random, ending in its number of steps."""
    node = check_node(flow, "a flow")
    count = _count(node)
    if count > MAX_MEMBERS:
        raise InvalidArgument(f"a flow has at most {MAX_MEMBERS} steps, got {count}")
    return f"fl{new_jid()[:24]}.{count}"


def plan(flow: Node, flow_id: str | None = None) -> tuple[list[Placed], list[str], bool]:
    """Return `flow`'s steps in an order that puts parents first, with their jids and
    parents; then the jids it ends with and whether they are a group's."""
    expected = new_flow_id(flow)
    if flow_id is None:
        flow_id = expected
    elif len(member_ids(flow_id)) != len(member_ids(expected)):
        raise InvalidArgument(f"flow id {flow_id!r} does not fit a flow of "
                              f"{len(member_ids(expected))} steps")
    placed: list[Placed] = []
    ends, gathered = _place(flow, [], False, placed, flow_id)
    return placed, ends, gathered


def member_ids(flow_id: str) -> list[str]:
    """Return the jids of a flow's members, read from its id (`<id>-0` ... `<id>-<n-1>`)."""
    check_jid(flow_id, kind="flow id")
    head, _, count = flow_id.rpartition(".")
    if not head.startswith("fl") or not count.isdigit() or not 0 < int(count) <= MAX_MEMBERS:
        raise InvalidArgument(f"not a flow id: {flow_id!r}")
    return [f"{flow_id}-{i}" for i in range(int(count))]
