"""Exceptions raised by the core client, and the mapping from the engine's error replies."""

from __future__ import annotations

import re

import redis

__all__ = [
    "QlessError",
    "InvalidArgument",
    "JobNotFound",
    "JobExists",
    "LostLockError",
    "InvalidStateTransition",
    "DependencyError",
    "LimitExceeded",
    "UnregisteredJobClass",
    "QlessConnectionError",
    "ScriptError",
    "ClusterNodeError",
    "SoftTimeLimitExceeded",
    "CALL_ERRORS",
    "error_from_reply",
    "strip_script_error",
]


class QlessError(Exception):
    """Base class of every error the core raises."""


class InvalidArgument(QlessError, ValueError):
    """An argument was refused (by the Python checks or by the engine)."""


class JobNotFound(QlessError, KeyError):
    """The job (or recurring job) does not exist."""

    def __str__(self) -> str:
        # KeyError quotes its argument; we want the message as written.
        return str(self.args[0]) if self.args else ""


class JobExists(QlessError):
    """A put with `if-absent` found the jid already there (nothing was written)."""


class LostLockError(QlessError):
    """The job was handed to another worker, is no longer running, or moved queue."""


class InvalidStateTransition(QlessError):
    """The job is in a state that does not allow the operation."""


class DependencyError(QlessError):
    """A dependency rule was broken (cancel of a dependency, depends on a job not waiting)."""


class LimitExceeded(InvalidArgument):
    """An argument is over a size limit (data bytes, list length, nesting depth)."""


class UnregisteredJobClass(QlessError):
    """A job names a class that is not in the worker's registry."""


class QlessConnectionError(QlessError, ConnectionError):
    """Redis could not be reached, timed out, or is not accepting writes (transient)."""


class ScriptError(QlessError):
    """Any other error reply from the engine or from Redis."""


class ClusterNodeError(QlessError):
    """A client of one server reached a node of a Redis Cluster (configure the cluster)."""


class SoftTimeLimitExceeded(Exception):
    """Raised inside a running job at its soft time limit, so it can clean up and stop.

    A job that catches it and returns completes normally; one that lets it propagate fails
    with the time-limit group; one that keeps running meets its hard limit.
    """


CLUSTER_NODE_MESSAGE = (
    "the server is a node of a Redis Cluster: a plain URL reaches one node only. Configure "
    "the cluster (Django: CLUSTER in the alias's settings; core: ShardedClient)"
)


# Everything a call through the core can raise about the server: our typed errors, and
# redis-py's own for the few paths (connecting, plain reads) that pass them through.
CALL_ERRORS: tuple[type[Exception], ...] = (QlessError, redis.RedisError)


# Redis 7: "user_script:12: <msg> script: <sha>, on @user_script:12."; as a function:
# "user_function:12: <msg> script: <function name>, on @user_function:12."
_WRAP_7 = re.compile(
    r"^(?:ERR )?(?:user_(?:script|function):\d+: )?(?P<msg>.*) script: \w+, on @\w+:\d+\.$",
    re.S,
)
# Redis 6.2: "Error running script (call to f_<sha>): @user_script:12: user_script:12: <msg>"
_WRAP_6 = re.compile(
    r"^(?:ERR )?Error running script \(call to f_[0-9a-f]{40}\): @\w+:\d+: (?:\w+:\d+: )?"
    r"(?P<msg>.*)$",
    re.S,
)

_LOCK_LOST = (
    "another worker",
    "given out to another",
    "handed out",
    "not currently running",
    "running in another queue",
)
_INVALID = (
    "arg \"",
    "argument",
    "must be",
    "odd number",
    "no value provided",
    "unrecognized option",
    "unknown type",
    "unknown action",
    "no live worker",
    "schedule type",
    "cannot be used without",
    "first argument",
    "collides with",
    "invalid",
)
_LIMIT = ("too large", "at most", "too deep", "too many")
_TRANSIENT = ("BUSY ", "LOADING ", "READONLY ", "MASTERDOWN ", "TRYAGAIN ")


def strip_script_error(text: str) -> str:
    """Return the Lua's own message from a Redis 6.2 or 7 script error reply."""
    for pattern in (_WRAP_7, _WRAP_6):
        match = pattern.match(text)
        if match:
            return match.group("msg")
    return text[4:] if text.startswith("ERR ") else text


def _classify(message: str) -> type[QlessError]:
    """Pick the exception class for an engine message."""
    low = message.lower()
    if any(phrase in low for phrase in _LOCK_LOST):
        return LostLockError
    if "if-absent refuses" in low:
        return JobExists
    if "does not exist" in low or "no recurring job" in low:
        return JobNotFound
    if "is a dependency" in low or "depends state" in low or "no such dependency" in low:
        return DependencyError
    if any(phrase in low for phrase in _INVALID):
        if any(phrase in low for phrase in _LIMIT):
            return LimitExceeded
        return InvalidArgument
    if any(phrase in low for phrase in _LIMIT):
        return LimitExceeded
    if "not running" in low or "state" in low:
        return InvalidStateTransition
    return ScriptError


def error_from_reply(exc: redis.ResponseError) -> QlessError:
    """Turn a Redis error reply from the engine into a typed exception (not raised)."""
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return QlessConnectionError(f"READONLY {exc}")
    text = str(exc)
    if text.startswith(_TRANSIENT):
        return QlessConnectionError(text)
    if ("non local key" in text or "do not hash to the same slot" in text
            or text.startswith(("MOVED ", "CROSSSLOT "))):
        return ClusterNodeError(f"{CLUSTER_NODE_MESSAGE} ({text.splitlines()[0][:120]})")
    message = strip_script_error(text)
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return ScriptError(f"OOM {message}")
    return _classify(message)(message)
