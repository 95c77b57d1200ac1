"""One server process of a LocalCluster, the process and port helpers it uses, and the
node-by-node steps of a slot move."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import redis

__all__ = [
    "ClusterNode",
    "describe",
    "kill_node",
    "move_slot",
    "myid",
    "pick_port",
    "ping",
    "port_free",
    "server_args",
    "spawn",
    "until",
]

BUS_OFFSET = 10000  # the cluster bus listens on port + 10000 (every version we run)
_T = TypeVar("_T")


@dataclass(eq=False)
class ClusterNode:
    """One server process of a LocalCluster (its port stays the same across restarts)."""

    port: int
    directory: str
    process: subprocess.Popen[bytes] | None = None
    node_id: str = ""
    frozen: bool = False  # SIGSTOPped: alive, but answering nothing
    _conn: redis.Redis | None = None

    @property
    def address(self) -> str:
        """Return host:port, as the cluster announces this node."""
        return f"127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        """Tell whether our process for this node exists (frozen or not)."""
        return self.process is not None and self.process.poll() is None

    @property
    def running(self) -> bool:
        """Tell whether our process for this node is alive and not frozen."""
        return self.alive and not self.frozen

    def conn(self) -> redis.Redis:
        """Return a plain connection to this node alone (decoded replies, no redirects)."""
        if not self.running:
            raise RuntimeError(f"node {self.address} is not running")
        if self._conn is None:
            self._conn = redis.Redis(
                host="127.0.0.1", port=self.port, decode_responses=True,
                socket_connect_timeout=2, socket_timeout=10,
            )
        return self._conn

    def call(self, *args: Any) -> Any:
        """Send one command to this node alone and return its reply."""
        return self.conn().execute_command(*args)  # type: ignore[no-untyped-call, unused-ignore]

    def launch(self, binary: str, node_timeout_ms: int, extra_args: list[str]) -> None:
        """Start this node's server process (in its own session, so ^C does not reach it)."""
        self.process = subprocess.Popen(
            server_args(binary, self, node_timeout_ms, extra_args),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True,
        )

    def log_tail(self, lines: int = 15) -> str:
        """Return the end of this node's log, for error messages."""
        try:
            text = Path(self.directory, "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __repr__(self) -> str:
        state = "up" if self.running else "down"
        return f"<ClusterNode {self.address} {self.node_id[:8]} {state}>"


def port_free(port: int) -> bool:
    """Tell whether nothing holds `port` on 127.0.0.1 (we could bind it)."""
    with socket.socket() as s:
        # As the server does: connections of a killed node linger in TIME_WAIT, a listener
        # of someone else's still makes the bind fail.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def kill_node(node: ClusterNode) -> None:
    """SIGKILL our process for `node` and reap it (no-op when it is not running)."""
    if node._conn is not None:
        node._conn.close()
        node._conn = None
    if node.process is not None and node.process.poll() is None:
        node.process.send_signal(signal.SIGKILL)  # also ends a SIGSTOPped process
        node.process.wait(timeout=10)
    node.frozen = False


def describe(nodes: list[ClusterNode]) -> str:
    """Return each node's state in one line (for error messages)."""
    parts = []
    for node in nodes:
        if not node.running:
            parts.append(f"{node.address} {'frozen' if node.frozen else 'down'}")
            continue
        try:
            state = str(node.call("CLUSTER", "INFO")).split("cluster_state:", 1)[1].split()[0]
            parts.append(f"{node.address} {node.call('ROLE')[0]} {state}")
        except (redis.RedisError, IndexError) as exc:
            parts.append(f"{node.address} {exc}")
    return ", ".join(parts)


def server_args(
    binary: str, node: ClusterNode, node_timeout_ms: int, extra_args: list[str]
) -> list[str]:
    """Return the server command line for `node`."""
    return [
        binary,
        "--port", str(node.port),
        "--bind", "127.0.0.1",
        "--dir", node.directory,
        "--logfile", os.path.join(node.directory, "server.log"),
        "--daemonize", "no",
        "--save", "",
        "--appendonly", "no",
        "--maxmemory-policy", "noeviction",
        "--cluster-enabled", "yes",
        "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout", str(node_timeout_ms),
        # Tests kill primaries on purpose: a replica may always take over, however long
        # its link was down, and a primary emptied by migrate_slot stays a primary.
        "--cluster-replica-validity-factor", "0",
        "--cluster-allow-replica-migration", "no",
        # Replicas sync at once rather than after the default 5 s wait for company.
        "--repl-diskless-sync", "yes",
        "--repl-diskless-sync-delay", "0",
        *extra_args,
    ]


def spawn(
    node: ClusterNode,
    binary: str,
    node_timeout_ms: int,
    extra_args: list[str],
    taken: set[int],
    deadline: float,
) -> None:
    """Start `node` on a fresh free port (and bus port); retry if another process took one
    between our check and the server's bind."""
    for _ in range(5):
        node.port = pick_port(taken)
        taken.add(node.port)
        node.launch(binary, node_timeout_ms, extra_args)
        try:
            until(deadline, lambda: ping(node), f"{node.address} to answer PING")
            return
        except RuntimeError:
            if "already in use" not in node.log_tail():
                raise
            for name in os.listdir(node.directory):
                os.remove(os.path.join(node.directory, name))
    raise RuntimeError(f"could not find a free port pair for {node.directory}")


def pick_port(taken: set[int]) -> int:
    """Return a loopback port that is free, and whose cluster bus port is free too."""
    for _ in range(500):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        bus = port + BUS_OFFSET
        if bus > 65535 or port in taken or bus in taken:
            continue
        if port_free(bus):
            return port
    raise RuntimeError("no free loopback port pair (port, port + 10000) found")


def until(deadline: float, probe: Callable[[], _T | None], what: str) -> _T:
    """Poll `probe` every 50 ms until it returns something other than None; raise at
    `deadline` (the poll count is bounded by it too)."""
    for _ in range(max(1, int((deadline - time.monotonic()) / 0.05) + 2)):
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


def ping(node: ClusterNode) -> bool | None:
    """Return True once `node` answers PING; raise if its process died."""
    if node.process is not None and node.process.poll() is not None:
        raise RuntimeError(f"server {node.address} exited early: {node.log_tail()}")
    try:
        return bool(node.conn().ping()) or None
    except redis.ConnectionError:
        return None


def myid(node: ClusterNode) -> str | None:
    """Return `node`'s cluster node id."""
    try:
        return str(node.call("CLUSTER", "MYID"))
    except redis.ConnectionError:
        return None


def move_slot(
    slot: int,
    source: ClusterNode,
    to: ClusterNode,
    others: list[ClusterNode],
    batch: int,
    deadline: float,
    on_batch: Callable[[int], None] | None,
) -> int:
    """Move `slot`'s keys from `source` to `to` and give `to` the slot on every primary
    (the target, the source, then `others`); return how many keys moved."""
    to.call("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
    source.call("CLUSTER", "SETSLOT", slot, "MIGRATING", to.node_id)
    # Keys only leave the source now (writes to missing keys are sent to the target with
    # ASK), so the initial count bounds the loop.
    rounds = int(source.call("CLUSTER", "COUNTKEYSINSLOT", slot)) // batch + 2
    moved = 0
    for _ in range(rounds):
        keys = source.call("CLUSTER", "GETKEYSINSLOT", slot, batch)
        if not keys:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"slot {slot}: the move did not finish in time")
        source.call("MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS", *keys)
        moved += len(keys)
        if on_batch is not None:
            on_batch(moved)
    else:
        raise RuntimeError(f"slot {slot}: keys kept appearing on the source")
    # The target first: once it owns the slot, ASK and MOVED both lead clients there.
    for node in [to, source, *others]:
        node.call("CLUSTER", "SETSLOT", slot, "NODE", to.node_id)
    return moved
