"""Workflows from ``@job`` functions and classes: signatures, chain, group, chord.

::

    from django_qless.workflows import chain, chord, group

    chain(fetch.s(url), parse.s(), store.s()).enqueue()        # each gets the last result
    chord(group(price.s(sku) for sku in skus), total.s()).enqueue()   # total([p1, p2, ...])

``f.s(*args, **kwargs)`` is a step calling ``f``; after another step it receives that step's
return value as its first positional argument (a list of results after a group). ``f.si(...)``
is immutable: it receives nothing. Arguments are checked against the function's signature
when the flow is built, knowing whether the step will receive a value. The whole flow is put
in one round trip, after the transaction commits like every other enqueue; ``enqueue()``
returns a `FlowHandle` whose jids are known at once. The core does the work
(``django_qless.core.flows``); docs/workflows.md has the rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from django_qless.core import flows as core
from django_qless.core.exceptions import InvalidArgument
from django_qless.errors import JobFailedError, ResultTimeout
from django_qless.handle import JobHandle, dispatch
from django_qless.options import JobOptions, encode_arguments, to_json

if TYPE_CHECKING:
    from django_qless.core.flows import FlowState
    from django_qless.decorators import JobClass, JobFunction

__all__ = ["Chain", "FlowHandle", "Group", "Signature", "chain", "chord", "group"]

# Options a step may not carry: a flow sets jids and dependencies itself, and a delayed or
# unique member would leave what follows it waiting on a job that may never exist.
_REFUSED = {"delay": 0.0, "depends": (), "jid": None, "unique": None}


@dataclass(frozen=True)
class Signature:
    """A call of a job kind to run as one step of a flow."""

    target: JobFunction[Any, Any] | JobClass
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    immutable: bool = False

    def __repr__(self) -> str:
        mark = "si" if self.immutable else "s"
        return f"<{self.target.klass}.{mark}(args={self.args!r}, kwargs={dict(self.kwargs)!r})>"

    def enqueue(self) -> FlowHandle:
        """Put this one step as a flow of its own."""
        return chain(self).enqueue()

    def _options(self, data: dict[str, Any]) -> JobOptions:
        from django_qless.decorators import JobClass

        if isinstance(self.target, JobClass):
            return self.target._options(data)
        return self.target.options

    def _step(self, receives: bool) -> tuple[core.Step, JobOptions]:
        """Return the core step (arguments checked), and its options."""
        from django_qless.decorators import JobClass

        target = self.target
        receive = receives and not self.immutable
        if isinstance(target, JobClass):
            data = target._data(self.args[0] if self.args else None)
        else:
            args = self.args
            if receive:  # the previous result comes first: check the rest after it
                args = (None, *args)
            out_args, out_kwargs = encode_arguments(target.klass, target.signature, args,
                                                    self.kwargs)
            data = {"args": out_args[1:] if receive else out_args, "kwargs": out_kwargs}
        options = self._options(data)
        for name, default in _REFUSED.items():
            if getattr(options, name) != default:
                raise InvalidArgument(f"{target.klass}: a flow step cannot have {name}= "
                                      f"(the flow orders its steps itself)")
        options.validate(data)
        step_options = {"priority": options.priority, "tags": options.tags,
                        "retries": options.retries, "throttles": options.throttles}
        return core.Step(target.klass, data, options.queue, step_options, receive), options


@dataclass(frozen=True)
class Chain:
    """Steps, chains and groups run one after another."""

    parts: tuple[Signature | Chain | Group, ...]

    def enqueue(self) -> FlowHandle:
        """Put the whole flow (after the transaction commits); return its handle."""
        return _enqueue(self)

    async def aenqueue(self) -> FlowHandle:
        """Enqueue from async code (in the thread that owns the DB connection)."""
        return await sync_to_async(self.enqueue, thread_sensitive=True)()


@dataclass(frozen=True)
class Group:
    """Steps, chains and groups run together."""

    parts: tuple[Signature | Chain | Group, ...]

    def enqueue(self) -> FlowHandle:
        """Put the whole flow (after the transaction commits); return its handle."""
        return _enqueue(self)

    async def aenqueue(self) -> FlowHandle:
        """Enqueue from async code (in the thread that owns the DB connection)."""
        return await sync_to_async(self.enqueue, thread_sensitive=True)()


Part = Signature | Chain | Group


def _check(parts: Iterable[Any], what: str) -> tuple[Part, ...]:
    out = tuple(parts)
    if not out:
        raise InvalidArgument(f"a {what} needs at least one step")
    for index, part in enumerate(out):
        if not isinstance(part, Signature | Chain | Group):
            hint = " (call .s() on a @job to make a step)" if callable(part) else ""
            raise InvalidArgument(f"{what} part {index} must be a signature (f.s(...)), a "
                                  f"chain or a group, got {type(part).__name__}{hint}")
    return out


def chain(*parts: Part) -> Chain:
    """Run `parts` one after another; each receives the previous result unless immutable."""
    return Chain(_check(parts, "chain"))


def group(*parts: Part | Iterable[Part]) -> Group:
    """Run `parts` together (``group(a.s(), b.s())`` or ``group(generator)``)."""
    only = parts[0] if len(parts) == 1 else None
    if isinstance(only, Iterable) and not isinstance(only, str | bytes | Mapping):
        return Group(_check(only, "group"))
    return Group(_check(parts, "group"))


def chord(header: Group | Iterable[Part], callback: Part) -> Chain:
    """Run `callback` after every part of `header`, receiving the list of their results."""
    if not isinstance(header, Group):
        header = group(header)
    return Chain((header, *_check([callback], "chord callback")))


def _to_core(part: Part, receives: bool, options: list[JobOptions]) -> core.Node:
    """Turn a Django flow into the core's, checking each step's arguments."""
    if isinstance(part, Signature):
        step, step_options = part._step(receives)
        options.append(step_options)
        return step
    if isinstance(part, Chain):
        out = []
        for index, item in enumerate(part.parts):
            out.append(_to_core(item, receives or index > 0, options))
        return core.chain(*out)
    return core.group(*[_to_core(item, receives, options) for item in part.parts])


def _enqueue(flow: Part) -> FlowHandle:
    """Check the flow, fix its jids, and put it now or after the commit."""
    from django_qless.clients import get_client
    from django_qless.running import eager_active

    options: list[JobOptions] = []
    node = _to_core(flow, False, options)
    aliases = sorted({o.alias for o in options})
    if len(aliases) > 1:
        raise InvalidArgument(f"a flow's steps must use one Redis alias, got {aliases}")
    placed, ends, gathered = core.plan(node)
    flow_id = placed[0].jid.rpartition("-")[0]
    first = options[0]
    members = [JobHandle(p.jid, p.step.klass, p.step.queue, first.alias) for p in placed]
    handle = FlowHandle(flow_id, members, ends, gathered, first.alias)
    if eager_active(first.alias):
        _run_eager(handle, placed, options)
        return handle

    def send() -> None:
        try:
            core.Flows(get_client(first.alias)).put(node, flow_id=flow_id)
        except BaseException:
            for member in members:
                member.status = "error"
            raise
        for member in members:
            member.status = "enqueued"
        for member, step_options in zip(members, options, strict=True):
            if step_options.track:
                member.client.track(member.jid)

    steps = f"{len(members)} step{'s' * (len(members) != 1)}"
    dispatch(first, send, f"flow {flow_id} of {steps}", members[0])
    return handle


def _run_eager(handle: FlowHandle, placed: list[core.Placed],
               options: list[JobOptions]) -> None:
    """Run every step inline in order, handing results on as the worker would."""
    from django_qless.running import run_eager

    results: dict[str, Any] = {}
    for member, item, step_options in zip(handle.members, placed, options, strict=True):
        data = dict(item.step.data)
        if item.step.receive and item.parents:
            values = [results[p] for p in item.parents]
            value = values if item.gather else values[0]
            data["args"] = [to_json(value, "a step's result"), *data.get("args", [])]
        results[item.jid] = member._value = run_eager(
            item.step.klass, data, step_options.merge({"jid": item.jid}))
        member.status = "eager"


class FlowHandle:
    """What ``enqueue()`` of a flow returns: its id, a handle per member, state and result."""

    def __init__(self, flow_id: str, members: list[JobHandle], ends: list[str],
                 gathered: bool, alias: str) -> None:
        self.id, self.members, self.alias = flow_id, members, alias
        self._ends, self._gathered = ends, gathered

    def __repr__(self) -> str:
        return f"FlowHandle(id={self.id!r}, steps={len(self.members)}, status={self.status!r})"

    @property
    def status(self) -> str:
        """Return where the enqueue stands: pending, discarded, error, enqueued or eager."""
        return self.members[0].status

    def _flows(self) -> core.Flows:
        from django_qless.clients import get_client

        return core.Flows(get_client(self.alias))

    def state(self) -> FlowState | None:
        """Return every member's jid, state and result and the flow's status (one read)."""
        return self._flows().get(self.id)

    def result(self, timeout: float | None = None) -> Any:
        """Return the last step's result (a list when the flow ends with a group).

        Raises JobFailedError for a failed member (wherever it is in the flow), and, as
        ``JobHandle.result``, ResultNotReady or (with ``timeout``) ResultTimeout.
        """
        import time

        by_jid = {m.jid: m for m in self.members}
        if self.status != "eager":
            self._raise_failure()
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        try:
            for jid in self._ends:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                values.append(by_jid[jid].result(left))
        except ResultTimeout:
            self._raise_failure()  # an earlier member failed: the end never runs
            raise
        return values if self._gathered else values[0]

    def _raise_failure(self) -> None:
        state = self.state()
        failed = state.failed if state is not None else []
        if failed:
            raise JobFailedError(failed[0].jid, dict(failed[0].failure or {}))

    async def aresult(self, timeout: float | None = None) -> Any:
        """``result(timeout)`` for async code."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.result, thread_sensitive=False)(timeout)

    def cancel(self) -> list[str]:
        """Cancel every member not complete; return the jids canceled."""
        return self._flows().cancel(self.id)

    def retry(self) -> list[str]:
        """Put the failed members back in their queues: the flow resumes from there."""
        return self._flows().retry(self.id)
