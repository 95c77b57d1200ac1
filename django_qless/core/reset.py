"""Empty one qless keyspace: what test suites need between tests (never used by workers).

`has_data(client)` tells whether the client's keyspace holds any key; `reset(client)`
deletes every key of it (each shard of a `ShardedClient` with `reset_all`). Keys are found
with SCAN on the keyspace's server and removed with UNLINK in batches, so a large keyspace
does not block Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import Client
    from .types import QlessClient

__all__ = ["has_data", "reset", "reset_all"]

_BATCH = 500


def has_data(client: Client) -> bool:
    """Tell whether the keyspace of `client` holds any key."""
    conn = client.node_redis()
    pattern = client.keyspace.pattern()
    return next(iter(conn.scan_iter(match=pattern, count=100)), None) is not None


def reset(client: Client) -> int:
    """Delete every key of the keyspace of `client`; return how many.

    The default keyspace's pattern also matches shard keyspaces on the same server.
    """
    conn = client.node_redis()
    removed = 0
    batch: list[Any] = []
    for key in conn.scan_iter(match=client.keyspace.pattern(), count=_BATCH):
        batch.append(key)
        if len(batch) == _BATCH:
            removed += int(conn.unlink(*batch))
            batch = []
    if batch:
        removed += int(conn.unlink(*batch))
    return removed


def reset_all(deployment: QlessClient) -> int:
    """Delete every key of each keyspace of a Client or ShardedClient; return how many."""
    return sum(reset(client) for client in deployment.clients())
