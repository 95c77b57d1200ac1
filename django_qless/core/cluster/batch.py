"""Many commands in one round trip per primary, with the transport's resend rules per reply."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    NoScriptError,
    TryAgainError,
)

from ..exceptions import InvalidArgument, QlessConnectionError
from .args import declared_key, only_reads
from .transport import ClusterTransport, NotRun

__all__ = ["did_not_run", "execute_many"]

_TRANSPORT_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


def did_not_run(reply: BaseException) -> bool:
    """Tell whether error reply `reply` means the command ran nowhere (so it may be resent):
    a redirect, a cluster in flux, or code missing on the node."""
    if isinstance(reply, (AskError, TryAgainError, ClusterDownError, NoScriptError,
                          BusyLoadingError)):
        return True  # AskError covers MovedError
    return "function not found" in str(reply).lower()


def execute_many(transport: ClusterTransport, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Send `commands` grouped by the primary owning each one's declared key, one pipeline
    per primary; return the replies in order, error replies as ResponseError instances.

    A reply saying the command did not run (MOVED, ASK, TRYAGAIN, missing code) is followed
    by sending that command alone through `transport.execute`, which applies every rule. A
    transport error on a node leaves that node's writes unknown: QlessConnectionError,
    unless all of them only read (then they are sent again, one by one).
    """
    keys = []
    for command in commands:
        key = declared_key(command)
        if key is None:
            raise InvalidArgument(f"{command[0]} declares no key")
        keys.append(key)
    if transport.mode == "auto":
        transport.load_engine()
    groups: dict[str, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(transport.primary_for(key), []).append(index)
    results: list[Any] = [None] * len(commands)
    again: list[int] = []
    for name, indexes in groups.items():
        try:
            replies = transport.send_pipeline(name, [commands[i] for i in indexes])
        except NotRun:
            again.extend(indexes)  # no connection: nothing sent
            continue
        except _TRANSPORT_ERRORS as exc:
            if all(only_reads(commands[i], transport.engine_names) for i in indexes):
                again.extend(indexes)
                continue
            raise QlessConnectionError(
                f"{type(exc).__name__} on {name}: {exc} (some commands may have run)"
            ) from exc
        for index, reply in zip(indexes, replies, strict=True):
            if isinstance(reply, redis.ResponseError) and did_not_run(reply):
                again.append(index)
            else:
                results[index] = reply
    for index in sorted(again):
        try:
            results[index] = transport.execute(commands[index])
        except redis.ResponseError as exc:
            results[index] = exc
    return results
