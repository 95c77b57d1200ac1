"""Put many jobs into one queue: validate them all, then one `put.many` call per chunk."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .engine.chain import invoke_chain
from .exceptions import InvalidArgument
from .serialization import check_klass, dumps_data, new_jids

if TYPE_CHECKING:
    from .queue import Queue

__all__ = ["MANY_CHUNK", "put_many"]

# Jobs per put.many call (the engine takes at most 1000): measured fastest, and it bounds
# the time one call holds Redis (~5 ms).
MANY_CHUNK = 500
# The engine's time step between the jobs of one put.many call (MANY_STEP in put.lua).
_STAGGER = 1e-6
_NO_KLASS = object()  # (no class checked yet)

PUT_KEYS = frozenset(
    {"klass", "data", "jid", "priority", "tags", "delay", "retries", "depends", "throttles",
     "depends_missing"}
)


def check_utf8(text: str) -> None:
    """Refuse text that cannot be sent (lone surrogates) before anything is sent."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"argument is not valid UTF-8 text: {exc.reason}") from None


def _group(queue: Queue, index: int, spec: Mapping[str, Any]) -> list[str]:
    """Validate job `index` (with options) and return its put.many group: jid klass data
    delay nopts opts."""
    if set(spec) - PUT_KEYS or "klass" not in spec or "data" not in spec:
        raise InvalidArgument(
            f"put_many item {index} needs klass and data and only put options, "
            f"got keys {sorted(spec)}"
        )
    options = {k: v for k, v in spec.items() if k not in ("klass", "data")}
    args = queue.put_args(spec["klass"], spec["data"], **options)
    group = [*args[2:6], str((len(args) - 6) // 2), *args[6:]]
    if not "".join(group).isascii():
        for arg in group:
            check_utf8(arg)
    return group


def put_many(queue: Queue, jobs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Put many jobs, one engine call per chunk of 500; return their jids in order.

    Every job is validated before anything is sent. The chunks run in order, each only once
    the one before was put (see chain.py): a refused chunk raises its typed error, the chunks
    before it were put, it and the ones after it were not.
    """
    client = queue.client
    chunks: list[list[str]] = []  # each: put.many's groups, its n put in front later
    chunk: list[str] = []
    count = len(jobs)
    fresh = new_jids(count)
    klass: object = _NO_KLASS
    klass_text = ""
    for index, spec in enumerate(jobs):
        if index % MANY_CHUNK == 0:
            chunk = []
            chunks.append(chunk)
        if len(spec) == 2 and "klass" in spec and "data" in spec:
            # A fresh jid names a new job, for which put's default options are the engine's
            # own defaults: send none (less for Redis to parse, the same job; the engine's
            # plain put). The texts are valid UTF-8: check_klass takes printable text only
            # and dumps_data encodes what is not ASCII.
            if spec["klass"] is not klass:  # (the jobs of a batch mostly share one class)
                klass = spec["klass"]
                klass_text = check_klass(klass)
            chunk += (fresh[index], klass_text, dumps_data(spec["data"]), "0", "0")
        else:
            chunk += _group(queue, index, spec)
    if client.router is not None:
        queue.check_shard(
            [d for spec in jobs for d in spec.get("depends", ())],
            dict.fromkeys(t for spec in jobs for t in spec.get("throttles", ())))
    if not chunks:
        return []
    start = client.now()
    worker, name = client.worker_name, queue.name
    # The engine puts job i of a call at its now + (i - 1) * 1e-6; one start time for every
    # chunk keeps the whole batch in order even on a clock that stands still.
    argvs = [
        ("put.many", repr(start + number * MANY_CHUNK * _STAGGER), worker, name,
         str(min(MANY_CHUNK, count - number * MANY_CHUNK)), *chunk)
        for number, chunk in enumerate(chunks)
    ]
    jids: list[str] = []
    for reply in invoke_chain(client.channel, argvs):
        jids += json.loads(reply)
    return jids
