"""How many jobs carry each of some tags (the engine's tag index keeps the count)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..serialization import check_text

if TYPE_CHECKING:
    from ..client import Client

__all__ = ["tag_counts"]


def tag_counts(client: Client, tags: Sequence[str]) -> dict[str, int]:
    """Return each tag's job count from the tag index, in one round trip (0: unused)."""
    wanted = [check_text("tag", t, 64) for t in tags]
    if not wanted:
        return {}
    key = client.keyspace.key("tags")

    def scores(conn: Any) -> list[Any]:
        pipe = conn.pipeline(transaction=False)
        for tag in wanted:  # (ZSCORE per tag: ZMSCORE needs Redis 6.2, and pipelines are one trip)
            pipe.zscore(key, tag)
        result: list[Any] = pipe.execute()
        return result

    return {tag: int(float(score or 0)) for tag, score in zip(wanted, client.read(scores),
                                                              strict=True)}
