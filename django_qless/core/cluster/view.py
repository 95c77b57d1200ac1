"""Read one node's view of a cluster (CLUSTER NODES): who is primary, who owns each slot."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ClusterView", "parse_nodes", "read_view"]

SLOTS = 16384
# Flags that mean a node is not a working member of the cluster (yet, or any more).
_UNHEALTHY = frozenset({"fail", "fail?", "handshake", "noaddr"})


@dataclass(frozen=True)
class ClusterView:
    """Roles and slot owners by port, as one node sees them; compares by those two only."""

    # port -> None for a primary, else the port of the primary it replicates.
    primary_of: dict[int, int | None]
    # (first slot, last slot, owner port), sorted by first slot.
    ranges: tuple[tuple[int, int, int], ...]
    flags: dict[int, frozenset[str]] = field(default_factory=dict, compare=False)
    links: dict[int, str] = field(default_factory=dict, compare=False)

    def owner(self, slot: int) -> int:
        """Return the port of the primary owning `slot`; KeyError if nobody does."""
        i = bisect.bisect_right(self.ranges, (slot, SLOTS, 1 << 30)) - 1
        if i >= 0 and self.ranges[i][0] <= slot <= self.ranges[i][1]:
            return self.ranges[i][2]
        raise KeyError(slot)

    def slots_of(self, port: int) -> list[tuple[int, int]]:
        """Return the slot ranges (first, last) owned by the primary on `port`."""
        return [(a, b) for a, b, p in self.ranges if p == port]

    def healthy(self, ports: set[int]) -> bool:
        """Tell whether every node in `ports` is known, connected and not flagged failing."""
        return all(
            p in self.primary_of and not (self.flags[p] & _UNHEALTHY)
            and self.links[p] == "connected"
            for p in ports
        )

    def restricted(self, ports: set[int]) -> ClusterView:
        """Return this view without nodes outside `ports` (say, ones we killed)."""
        return ClusterView(
            {p: m for p, m in self.primary_of.items() if p in ports},
            self.ranges,
            {p: f for p, f in self.flags.items() if p in ports},
            {p: s for p, s in self.links.items() if p in ports},
        )

    def covers_all(self, ports: set[int]) -> bool:
        """Tell whether all slots are owned, by primaries in `ports`, and every replica's
        primary is in `ports`."""
        total = sum(b - a + 1 for a, b, _ in self.ranges)
        owners_ok = all(self.primary_of.get(p, 0) is None for _, _, p in self.ranges)
        replicas_ok = all(m is None or m in ports for m in self.primary_of.values())
        return total == SLOTS and owners_ok and replicas_ok


def parse_nodes(text: str) -> ClusterView:
    """Parse a CLUSTER NODES reply (slot migration markers in [...] are skipped)."""
    ids: dict[str, int] = {}
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        # ip:port@cport, optionally followed by ,hostname
        port = int(parts[1].split("@", 1)[0].rsplit(":", 1)[1])
        ids[parts[0]] = port
        rows.append((port, parts))
    primary_of: dict[int, int | None] = {}
    flags: dict[int, frozenset[str]] = {}
    links: dict[int, str] = {}
    ranges: list[tuple[int, int, int]] = []
    for port, parts in rows:
        flag_set = frozenset(parts[2].split(","))
        flags[port] = flag_set
        links[port] = parts[7]
        is_replica = "slave" in flag_set or "replica" in flag_set
        primary_of[port] = ids.get(parts[3], -1) if is_replica else None
        for item in parts[8:]:
            if item.startswith("["):
                continue
            first, _, last = item.partition("-")
            ranges.append((int(first), int(last or first), port))
    return ClusterView(primary_of, tuple(sorted(ranges)), flags, links)


def read_view(conn: Any) -> ClusterView:
    """Return the view of the node behind redis-py connection `conn`."""
    reply = conn.execute_command("CLUSTER", "NODES")
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    return parse_nodes(text)
