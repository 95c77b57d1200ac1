"""What a command sent to a cluster declares (its key, whether it only reads), the cluster
transport's errors, and the redis-py cluster client it uses."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import AskError, MovedError

from ..engine.invoke import READ_ONLY_COMMANDS
from ..engine.lua import function_name, script_sha
from ..exceptions import InvalidArgument, QlessConnectionError, QlessError

__all__ = ["NotDurable", "NotRun", "NotSent", "SCRIPT_CALLS", "build_cluster",
           "declared_key", "engine_names", "only_reads", "redirect_target", "sha1"]

SCRIPT_CALLS = frozenset({"FCALL", "FCALL_RO", "EVALSHA", "EVALSHA_RO", "EVAL", "EVAL_RO"})
_RO_VERBS = frozenset({"FCALL_RO", "EVALSHA_RO", "EVAL_RO"})


class NotRun(QlessConnectionError):
    """The cluster kept refusing the command (moving, failing over) until the time ran out;
    it did not run anywhere."""


class NotDurable(QlessError):
    """The write ran on the primary but fewer replicas than asked confirmed it in time.

    `reply` is the command's reply; `replicas` how many confirmed. A failover before the
    replicas catch up would lose the write (docs/scaling.md, "What failover can lose").
    """

    def __init__(self, message: str, reply: Any, replicas: int) -> None:
        super().__init__(message)
        self.reply = reply
        self.replicas = replicas


class NotSent(Exception):
    """A connection could not be made: nothing was sent."""


def redirect_target(error: MovedError | AskError) -> str:
    """Return `host:port` of the node a redirect names."""
    return f"{error.host}:{error.port}"


def declared_key(command: Sequence[Any]) -> str | None:
    """Return the first key a script call declares (FCALL/EVALSHA form), else None."""
    if str(command[0]).upper() in SCRIPT_CALLS and len(command) > 3 and int(command[2]) > 0:
        return str(command[3])
    return None


def engine_names(caller_time: bool) -> frozenset[str]:
    """Return the engine's function names and script sha (what `_read_only` looks inside)."""
    name = function_name(caller_time)
    return frozenset({name, f"{name}_ro", script_sha(caller_time)})


def build_cluster(
    cluster: RedisCluster | str | Sequence[str], timeout: float | None
) -> RedisCluster:
    """Return the caller's RedisCluster (checked), or one built from cluster URLs."""
    if isinstance(cluster, RedisCluster):
        if not cluster.nodes_manager.connection_kwargs.get("decode_responses"):
            raise InvalidArgument("pass a RedisCluster built with decode_responses=True")
        if timeout is not None:
            raise InvalidArgument("set socket_timeout on the RedisCluster you pass")
        return cluster
    urls = [cluster] if isinstance(cluster, str) else list(cluster)
    if not urls:
        raise InvalidArgument("give at least one cluster URL")
    others = []
    for url in urls[1:]:
        parsed = redis.connection.parse_url(url)  # type: ignore[no-untyped-call, unused-ignore]
        others.append(ClusterNode(parsed["host"], parsed.get("port", 6379)))  # type: ignore[no-untyped-call, unused-ignore]
    options: dict[str, Any] = {"decode_responses": True}
    if timeout is not None:
        options["socket_timeout"] = options["socket_connect_timeout"] = timeout
    if others:
        options["startup_nodes"] = others
    return RedisCluster.from_url(urls[0], **options)


def sha1(text: str) -> str:
    """Return the SHA1 Redis gives `text` as a script."""
    return hashlib.sha1(text.encode()).hexdigest()  # noqa: S324 - Redis's id


def only_reads(command: Sequence[Any], engine: frozenset[str]) -> bool:
    """Tell whether `command` only reads: an _RO verb, a function named `*_ro`, or an engine
    command listed in READ_ONLY_COMMANDS."""
    verb = str(command[0]).upper()
    if verb in _RO_VERBS:
        return True
    if verb not in SCRIPT_CALLS or len(command) < 3:
        return False
    name = str(command[1])
    if verb == "FCALL" and name.endswith("_ro"):
        return True
    position = 3 + int(command[2])
    return name in engine and len(command) > position and command[position] in READ_ONLY_COMMANDS
