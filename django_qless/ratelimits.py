"""``@job(rate_limit="10/s", rate_key=...)``: a job kind's rate limit, defined in Redis by
the first enqueue of each process, and the per-job key it is counted by.

The engine counts a kind's starts in the keyspace of the queue the job is put into. On a
sharded deployment a kind's limit has a home shard, as a named throttle does: the shard of
the queue of its first job (recorded with the throttles' homes); a job of that kind put into
a queue of another shard is refused, since its starts would be counted apart. A function
job's ``rate_key`` names one of its parameters: the
argument's value is sent with the job data as ``"rate_key"``, the path the limit reads. A
class job's ``rate_key`` is a dotted path into its data dict.
"""

from __future__ import annotations

import hashlib
import inspect
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django_qless.core.scheduling.ratelimit import RateLimitError, check_key, parse_rate

if TYPE_CHECKING:
    from django_qless.core.client import Client

__all__ = ["DATA_KEY", "check_home", "check_rate_options", "ensure_kind_limit",
           "function_rate_key", "home_id"]

DATA_KEY = "rate_key"  # where a function job's key value travels in its data

# (keyspace, klass) -> (rate, key path) defined by this process; set again on a change.
_defined: dict[tuple[str, str], tuple[str, str]] = {}
_lock = threading.Lock()


def check_rate_options(rate_limit: str | None, rate_key: str | None) -> None:
    """Refuse a bad rate or key, and a key without a rate, at decoration time."""
    if rate_limit is not None:
        parse_rate(rate_limit)
    if rate_key is not None:
        if rate_limit is None:
            raise RateLimitError("rate_key needs rate_limit (the rate each key is held to)")
        check_key(rate_key)


def function_rate_key(klass: str, signature: inspect.Signature, name: str,
                      args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """Return the value of parameter `name` in a call, as the text the limit counts by."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    if name not in bound.arguments:
        raise RateLimitError(f"{klass}: rate_key {name!r} is not a parameter of the function")
    value = bound.arguments[name]
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise RateLimitError(f"{klass}: rate_key argument {name!r} must be a string or a "
                             f"number, got {type(value).__name__}")
    return str(value)


def home_id(klass: str) -> str:
    """Return the id under which a kind limit's home shard is recorded."""
    if len(klass) <= 100:
        return f"rate:{klass}"
    return "rate:#" + hashlib.sha256(klass.encode("utf-8")).hexdigest()[:40]


def check_home(client: Client, klass: str, queue: str) -> None:
    """Refuse a job of a limited kind in a queue outside the kind limit's home shard."""
    router = client.router
    if router is None or client.shard is None:
        return
    home = router.throttle_home(home_id(klass), client.shard)
    if home != client.shard:
        raise RateLimitError(
            f"{klass} has its rate limit in shard {home}, but queue {queue!r} is in shard "
            f"{client.shard}: a kind's limit counts the jobs of one shard (put its jobs in "
            f"queues of that shard, or limit the queue instead)")


def ensure_kind_limit(client: Client, klass: str, rate_limit: str, key_path: str,
                      queue: str = "") -> None:
    """Define the kind's limit in the client's keyspace, once per process (and on a change);
    on a sharded deployment, only in the kind's home shard."""
    slot = (client.keyspace.key(""), klass)
    want = (rate_limit, key_path)
    if _defined.get(slot) == want:
        return
    check_home(client, klass, queue)
    with _lock:
        if _defined.get(slot) != want:
            client.rate_limits.set("kind", klass, rate_limit, key=key_path or None)
            _defined[slot] = want
