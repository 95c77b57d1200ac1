"""Run engine calls in order, each only after the one before succeeded, the next already sent.

`put_many` sends one `put.many` call per chunk and must stop at the first refused chunk. On
one server the calls overlap anyway: call i+1 is sent inside a MULTI while call i runs, and
only its EXEC waits for call i's reply (a refusal sends DISCARD instead, so call i+1 never
runs). Redis then runs the chunks back to back while the client packs the next one; it idles
only for the round trip of the EXEC. A server refusing MULTI (an ACL user without
@transaction) and a shard of a cluster run the calls one after another; the shard's
transport follows the cluster (moves, failovers, durable writes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from hiredis import pack_command

from ..exceptions import error_from_reply
from .channel import TRANSPORT_ERRORS, Channel, NodeChannel, connection_error, utf8_error

__all__ = ["invoke_chain"]

_MULTI = pack_command(("MULTI",))
_EXEC = pack_command(("EXEC",))
_DISCARD = pack_command(("DISCARD",))


def invoke_chain(channel: Channel, argvs: Sequence[Sequence[str]]) -> list[Any]:
    """Run each argv (command, now, args) in order, each only once the one before succeeded.

    Returns the raw replies. The first refusal is raised as its typed QlessError: the calls
    before it ran, it and the calls after it did not. A transport error raises
    QlessConnectionError: the calls before the one in flight ran, that one may have run, the
    ones after it did not.
    """
    if not isinstance(channel, NodeChannel) or len(argvs) < 2:
        return [channel.invoke(argv) for argv in argvs]
    if channel.invoker.mode == "auto":
        channel.load()
    replies: list[Any] = []
    reloaded = False
    while True:
        ran = _run_overlapped(channel, argvs[len(replies):])
        if ran is None:  # no MULTI for this user (an ACL without @transaction): one by one
            return replies + [channel.invoke(argv) for argv in argvs[len(replies):]]
        done, missing = ran
        replies += done
        if missing is None:
            return replies
        refusal, sent = missing
        if reloaded:  # flushed again right after the reload: report it, nothing more ran
            raise error_from_reply(refusal) from refusal
        reloaded = True
        channel.recover(refusal, sent)  # the engine was not there: that call did not run


def _run_overlapped(
    channel: NodeChannel, argvs: Sequence[Sequence[str]]
) -> tuple[list[Any], tuple[redis.ResponseError, Sequence[Any]] | None] | None:
    """Run the calls on one connection, each sent in a MULTI while the one before runs.

    Returns the replies, and the error of a call that found the engine missing with the
    command sent (it and the later calls did not run); raises any other refusal. Returns
    None, having run nothing, if the server refuses MULTI.
    """
    invoker = channel.invoker
    for first in {argv[0]: argv for argv in argvs}.values():
        channel.prepare(invoker.command(first))  # each command's own script on 6.2, loaded
    pool = channel.redis.connection_pool
    try:
        conn: Any = pool.get_connection()
    except TRANSPORT_ERRORS as exc:
        raise connection_error(exc) from exc
    replies: list[Any] = []
    clean = False  # whether every reply sent for was read (else the connection is dropped)
    refusal: redis.ResponseError | None = None
    try:
        # MULTI alone first: were it refused, the calls sent after it would run at once,
        # whatever became of the ones before them.
        conn.send_packed_command([_MULTI])
        try:
            conn.read_response()
        except redis.ResponseError:
            clean = True
            return None
        command = invoker.command(argvs[0])
        conn.send_packed_command([pack_command(command), _EXEC])
        for index in range(len(argvs)):
            following = index + 1 < len(argvs)
            if following:  # packed and queued while this call runs; it waits for our EXEC
                upcoming = invoker.command(argvs[index + 1])
                conn.send_packed_command([_MULTI, pack_command(upcoming)])
            reply, refusal = _read_transaction(conn, index > 0)
            if refusal is not None:
                if following:
                    conn.send_packed_command([_DISCARD])
                    _read_discarded(conn)
                clean = True
                if invoker.missing(refusal, command):
                    return replies, (refusal, command)
                break
            replies.append(reply)
            if following:
                conn.send_packed_command([_EXEC])
                command = upcoming
        clean = True
    except redis.ResponseError as exc:  # to MULTI or EXEC themselves: not the engine's
        raise error_from_reply(exc) from exc
    except TRANSPORT_ERRORS as exc:
        raise connection_error(exc) from exc
    except UnicodeEncodeError as exc:
        raise utf8_error(exc) from None
    finally:
        if not clean:
            conn.disconnect()  # replies may be left on it: never hand it out again
        pool.release(conn)
    if refusal is not None:
        raise error_from_reply(refusal) from refusal
    return replies, None


def _read_transaction(conn: Any, multi: bool) -> tuple[Any, redis.ResponseError | None]:
    """Read the replies to MULTI (unless read already), the call and EXEC; return the call's
    reply or its refusal."""
    if multi:
        conn.read_response()  # OK
    queued: redis.ResponseError | None = None
    try:
        conn.read_response()  # QUEUED
    except redis.ResponseError as exc:
        queued = exc  # refused before it could run (OOM, ACL, ...): EXEC aborts
    try:
        result = conn.read_response()
    except redis.ResponseError as exc:
        return None, queued or exc
    reply = result[0]
    if isinstance(reply, redis.ResponseError):
        return None, reply
    return reply, None


def _read_discarded(conn: Any) -> None:
    """Read the replies to MULTI, a queued call and DISCARD."""
    conn.read_response()  # OK
    try:
        conn.read_response()  # QUEUED, or its refusal: discarded either way
    except redis.ResponseError:
        pass
    conn.read_response()  # OK
