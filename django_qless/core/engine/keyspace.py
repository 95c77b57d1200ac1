"""The names of one qless keyspace: the default `ql:` or a shard `ql:{<tag>}:`.

A shard is a complete qless keyspace whose every key carries one hash tag, so on Redis
Cluster it lives in one slot. The engine is told the keyspace by its one key, the prefix
itself (numkeys 1, KEYS[1] = `ql:{<tag>}:`); the default keyspace passes no key and keeps
qless-core's layout, so stock clients see nothing different. Every key and channel name in
core/ is built here: `key("j:" + jid)` is `ql:j:<jid>` or `ql:{s3}:j:<jid>`.
"""

from __future__ import annotations

import re

from ..exceptions import InvalidArgument

__all__ = ["DEFAULT", "Keyspace"]

_TAG = re.compile(r"[A-Za-z0-9_-]{1,32}")


class Keyspace:
    """Build the key and channel names of one keyspace (immutable)."""

    __slots__ = ("tag", "prefix", "engine_keys")

    def __init__(self, tag: str | None = None) -> None:
        if tag is not None and (not isinstance(tag, str) or not _TAG.fullmatch(tag)):
            raise InvalidArgument(f"keyspace tag must be 1-32 of A-Z a-z 0-9 _ -, got {tag!r}")
        self.tag = tag
        self.prefix = "ql:" if tag is None else f"ql:{{{tag}}}:"
        # The keys of every engine call: none for the default keyspace, else the prefix.
        self.engine_keys: tuple[str, ...] = () if tag is None else (self.prefix,)

    def __repr__(self) -> str:
        return f"Keyspace({self.tag!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Keyspace) and other.tag == self.tag

    def __hash__(self) -> int:
        return hash(self.tag)

    @property
    def sharded(self) -> bool:
        """Tell whether this is a shard (its channels are sharded channels on Redis 7+)."""
        return self.tag is not None

    def key(self, name: str) -> str:
        """Return the key `name` (qless-core's name without `ql:`) of this keyspace."""
        return self.prefix + name

    def channel(self, name: str) -> str:
        """Return the pub/sub channel `name` (without `ql:`) of this keyspace."""
        return self.prefix + name

    def name(self, key: str) -> str:
        """Return `key` without this keyspace's prefix (the inverse of `key`)."""
        if not key.startswith(self.prefix):
            raise InvalidArgument(f"{key!r} is not a key of {self!r}")
        return key[len(self.prefix):]

    def pattern(self, glob: str = "*") -> str:
        """Return a SCAN/PSUBSCRIBE pattern of this keyspace's names matching `glob`.

        The default keyspace's `ql:*` also matches shards' keys on the same server; a shard's
        braces are escaped so they match literally.
        """
        if self.tag is None:
            return self.prefix + glob
        return f"ql:\\{{{self.tag}\\}}:" + glob

    def uses_sharded_pubsub(self, server_major: int) -> bool:
        """Tell whether the engine publishes this keyspace's channels with SPUBLISH.

        It does for a shard on Redis/Valkey 7+; the default keyspace, and any keyspace on an
        older server, publishes plainly. Readers must SSUBSCRIBE to sharded channels.
        """
        return self.sharded and server_major >= 7


DEFAULT = Keyspace()
