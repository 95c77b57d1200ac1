"""Where each queue lives: shard tags spread over the slot space, and a recorded placement.

A shard is named `s<i>`; its hash tag (the text in braces of every key of its keyspace
`ql:{<tag>}:`) is chosen so that the first N shards, for any N, sit evenly spaced over the
16384 hash slots: shard i aims at the slot band that bit-reversal order gives it (s0 at slot
0, s1 at 8192, s2 at 4096, s3 at 12288, s4 at 2048, ...), each band 16 slots wide, and its
tag is `s<i>` when that hashes (CRC16, as Redis does) into its band, else the first
`s<i>-<n>` that does. A cluster's primaries own contiguous slot ranges, so evenly spaced
shards land evenly on them. The table is a pure function of i: it never changes as N grows.

A queue's shard is, in order: the explicit setting; the placement recorded in the home
shard (`ql:{<tag of s0>}:placement`, queue -> tag, written once with HSETNX, so racing
clients agree); for a queue never placed, CRC32(name) mod N, recorded at first use. Adding
shards later only places new queues on them: a recorded queue stays where its jobs are.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from collections.abc import Mapping
from functools import cache
from typing import Any, Protocol

from redis.crc import key_slot

from ..exceptions import InvalidArgument
from ..serialization import check_name

__all__ = ["MAX_SHARDS", "Placement", "Transport", "keyspace", "shard_tag", "target_slot"]

SLOTS = 16384
#: Shard indexes go up to MAX_SHARDS - 1: bit reversal over 10 bits gives 1024 bands.
MAX_SHARDS = 1024
_BITS = 10
_BAND = SLOTS // MAX_SHARDS  # 16 slots
# Compare-and-set of a queue's placement: switch from ARGV[2] to ARGV[3], clear the
# moving marker and note when, by this server's clock (KEYS[1] the placement hash, KEYS[2]
# the markers, KEYS[3] the switch times; one shard, one slot). A repeat keeps the time.
_SWITCH = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current == ARGV[3] then redis.call('HDEL', KEYS[2], ARGV[1]) return 1 end
if current ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HDEL', KEYS[2], ARGV[1])
local t = redis.call('TIME')
redis.call('HSET', KEYS[3], ARGV[1], cjson.encode({['from'] = ARGV[2], ['to'] = ARGV[3],
  ['at'] = tonumber(t[1]) + tonumber(t[2]) / 1000000}))
return 1
"""
# Seconds since queue ARGV[1] was switched to ARGV[2] (KEYS[1] the switch times), by the
# clock that noted the switch; nil when no such switch is noted.
_SINCE = """
local noted = redis.call('HGET', KEYS[1], ARGV[1])
if not noted then return false end
local m = cjson.decode(noted)
if m['to'] ~= ARGV[2] then return false end
local t = redis.call('TIME')
return tostring(tonumber(t[1]) + tonumber(t[2]) / 1000000 - m['at'])
"""
# Mark a queue moving from its recorded shard to ARGV[2]; refused (returns the marker) when
# another move is marked; repeat-safe for the same move.
_MARK = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return {0, ''} end
local marker = redis.call('HGET', KEYS[2], ARGV[1])
if marker then
  local m = cjson.decode(marker)
  if m['to'] == ARGV[2] and m['from'] == current then return {1, current} end
  return {0, marker}
end
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode({['from'] = current, ['to'] = ARGV[2],
  ['since'] = tonumber(ARGV[3])}))
return {1, current}
"""


def check_queue(queue: object) -> str:
    """Check a queue name as the engine does."""
    return check_name("queue", queue)


class Transport(Protocol):
    """What placement needs from a connection: one command routed by its key."""

    def execute(self, command: tuple[Any, ...], *, key: str | None = None,
                follow_ask: bool | None = None) -> Any: ...


def target_slot(index: int) -> int:
    """Return the first slot of shard `index`'s band (bit-reversal order over 10 bits)."""
    if not 0 <= index < MAX_SHARDS:
        raise InvalidArgument(f"shard index must be in [0, {MAX_SHARDS}), got {index}")
    reversed_bits = int(format(index, f"0{_BITS}b")[::-1], 2)
    return reversed_bits * _BAND


@cache
def shard_tag(index: int) -> str:
    """Return the hash tag of shard `index`: `s<i>`, or `s<i>-<n>` for the first n whose
    CRC16 slot falls in the shard's band."""
    first = target_slot(index)
    for n in range(200_000):  # a band holds 1/1024 of the slots: found in ~1,000 tries
        tag = f"s{index}" if n == 0 else f"s{index}-{n}"
        if first <= key_slot(tag.encode()) < first + _BAND:
            return tag
    raise AssertionError(f"no tag found for shard {index}")  # pragma: no cover


def keyspace(tag: str) -> str:
    """Return the key prefix of the shard with hash tag `tag`: `ql:{<tag>}:`."""
    return f"ql:{{{tag}}}:"


class Placement:
    """Map queues to shards: explicit settings, then recorded placements, then a hash."""

    def __init__(
        self,
        transport: Transport,
        shards: int,
        explicit: Mapping[str, int | str] | None = None,
        *,
        cache_seconds: float = 5.0,
    ) -> None:
        """Place queues over `shards` shards; `explicit` maps a queue to a shard index or
        tag. Recorded placements are cached for `cache_seconds` (a move waits that long)."""
        if not 1 <= shards <= MAX_SHARDS:
            raise InvalidArgument(f"shards must be in [1, {MAX_SHARDS}], got {shards}")
        self._t = transport
        self.shards = shards
        self.tags = [shard_tag(i) for i in range(shards)]
        self.home = keyspace(self.tags[0])
        self._key = f"{self.home}placement"
        self._moving_key = f"{self.home}placement-moving"
        self._switched_key = f"{self.home}placement-switched"
        self._explicit = {check_queue(q): self.tag_of(v) for q, v in (explicit or {}).items()}
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    @property
    def explicit(self) -> dict[str, str]:
        """Return the queues pinned by the explicit setting (queue -> tag)."""
        return dict(self._explicit)

    def tag_of(self, shard: int | str) -> str:
        """Return the tag of `shard` (an index, a name `s<i>`, or a tag)."""
        if isinstance(shard, str) and shard.startswith("s") and shard[1:].isdigit():
            shard = int(shard[1:])
        if isinstance(shard, int):
            if not 0 <= shard < self.shards:
                raise InvalidArgument(f"no shard {shard} of {self.shards}")
            return self.tags[shard]
        if shard in self.tags:
            return shard
        raise InvalidArgument(f"unknown shard {shard!r}")

    def default_tag(self, queue: str) -> str:
        """Return the shard a queue never placed goes to: CRC32(name) mod N."""
        return self.tags[zlib.crc32(queue.encode()) % self.shards]

    def shard_of(self, queue: str, *, record: bool = True) -> str:
        """Return the tag of `queue`'s shard, recording the placement at first use (unless
        `record` is False: then a queue never placed gets its default, unrecorded)."""
        queue = check_queue(queue)
        tag = self._explicit.get(queue)
        if tag is not None:
            return tag
        cached = self._cache.get(queue)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        found = self._t.execute(("HGET", self._key, queue), key=self._key)
        if found is None:
            return self.record(queue) if record else self.default_tag(queue)
        self._remember(queue, str(found))
        return str(found)

    def keyspace_of(self, queue: str) -> str:
        """Return the key prefix of `queue`'s shard."""
        return keyspace(self.shard_of(queue))

    def record(self, queue: str, tag: str | None = None) -> str:
        """Record `queue` on `tag` (default: its hash) unless it is placed already; return
        where it is placed (the first writer wins, so racing clients agree)."""
        queue = check_queue(queue)
        want = self.default_tag(queue) if tag is None else self.tag_of(tag)
        self._t.execute(("HSETNX", self._key, queue, want), key=self._key)
        placed = str(self._t.execute(("HGET", self._key, queue), key=self._key))
        self._remember(queue, placed)
        return placed

    def _remember(self, queue: str, tag: str) -> None:
        with self._lock:
            self._cache[queue] = (tag, time.monotonic() + self.cache_seconds)

    def recorded(self) -> dict[str, str]:
        """Return every recorded placement (queue -> tag)."""
        reply = self._t.execute(("HGETALL", self._key), key=self._key)
        return {str(q): str(t) for q, t in dict(reply or {}).items()}

    def queues_by_shard(self) -> dict[str, list[str]]:
        """Return the queues of each shard tag (recorded and explicit), names sorted."""
        placed = {**self.recorded(), **self._explicit}
        shards: dict[str, list[str]] = {tag: [] for tag in self.tags}
        for queue, tag in placed.items():
            shards.setdefault(tag, []).append(queue)
        return {tag: sorted(queues) for tag, queues in shards.items()}

    # -- moves (the marker and the switch; the procedure is in docs/scaling.md) -------------

    def mark_moving(self, queue: str, to: int | str) -> str:
        """Mark `queue` as moving to shard `to`; return the shard it moves from. Repeat-safe;
        refused while another move of it is marked, or for a queue never placed."""
        queue = check_queue(queue)
        tag = self.tag_of(to)
        ok, detail = self._t.execute(
            ("EVAL", _MARK, 2, self._key, self._moving_key, queue, tag, time.time()),
            key=self._key, follow_ask=True)
        if not int(ok):
            raise InvalidArgument(f"cannot mark {queue!r} moving: "
                                  f"{detail or 'it is not placed yet'}")
        return str(detail)

    def moving(self) -> dict[str, dict[str, Any]]:
        """Return the queues marked moving: queue -> {"from", "to", "since"}."""
        reply = self._t.execute(("HGETALL", self._moving_key), key=self._moving_key)
        return {str(q): json.loads(m) for q, m in dict(reply or {}).items()}

    def switch(self, queue: str, expected: int | str, to: int | str) -> bool:
        """Point `queue` at shard `to` if it is still recorded on `expected` (compare and
        set), clear its moving marker and note the time; True once it points at `to`
        (repeat-safe: a repeat keeps the first time)."""
        queue = check_queue(queue)
        done = self._t.execute(
            ("EVAL", _SWITCH, 3, self._key, self._moving_key, self._switched_key, queue,
             self.tag_of(expected), self.tag_of(to)),
            key=self._key, follow_ask=True)
        with self._lock:
            self._cache.pop(queue, None)
        return bool(int(done))

    def switched_since(self, queue: str, to: int | str) -> float | None:
        """Return how many seconds ago `queue` was switched to shard `to` (by the clock of
        the server holding the placement), or None when no such switch is noted."""
        since = self._t.execute(
            ("EVAL", _SINCE, 1, self._switched_key, check_queue(queue), self.tag_of(to)),
            key=self._switched_key, follow_ask=True)
        return None if since is None else float(since)

    def forget_switch(self, queue: str) -> None:
        """Drop the noted time of `queue`'s last switch (its move is over)."""
        self._t.execute(("HDEL", self._switched_key, check_queue(queue)),
                        key=self._switched_key)

    def clear_moving(self, queue: str) -> None:
        """Drop `queue`'s moving marker (an abandoned move; the placement is unchanged)."""
        self._t.execute(("HDEL", self._moving_key, check_queue(queue)), key=self._moving_key)
