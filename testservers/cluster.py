"""Start a real local Redis or Valkey cluster of our own on loopback, for tests.

`LocalCluster` starts N primaries with R replicas each, every node a process of ours on a
free 127.0.0.1 port with its own directory in one temp dir, joins them with the server's CLI
(`--cluster create`), and offers what fault tests need: kill a primary, restart a node,
freeze (SIGSTOP) and thaw a node, manual failover, add and remove nodes, slot migration
while traffic flows. It only ever talks to its own nodes.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any

import redis
from redis.cluster import ClusterNode as _RedisPyNode
from redis.cluster import RedisCluster
from redis.crc import key_slot

from django_qless.core.cluster.view import SLOTS, ClusterView, read_view
from testservers.cluster_node import (
    BUS_OFFSET,
    ClusterNode,
    describe,
    kill_node,
    move_slot,
    myid,
    ping,
    port_free,
    spawn,
    until,
)
from testservers.redis_server import find_cli, find_redis_server, server_kind

__all__ = ["ClusterNode", "ClusterView", "LocalCluster", "SLOTS"]


def _cleanup(nodes: list[ClusterNode], directory: str) -> None:
    """Kill every node process and remove the cluster's temp dir (also runs at exit)."""
    for node in nodes:
        kill_node(node)
    shutil.rmtree(directory, ignore_errors=True)


class LocalCluster:
    """A cluster of our own server processes on loopback: `primaries` + `replicas` each."""

    def __init__(
        self,
        binary: str | None = None,
        primaries: int = 3,
        replicas: int = 1,
        *,
        node_timeout_ms: int = 2000,
        extra_args: list[str] | None = None,
        cli: str | None = None,
    ) -> None:
        if primaries < 3:
            raise ValueError("a cluster needs at least 3 primaries (the CLI refuses fewer)")
        self.binary = binary or find_redis_server()
        self.kind = server_kind(self.binary)
        self.cli = cli or find_cli(self.binary)
        self.n_primaries = primaries
        self.n_replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.extra_args = list(extra_args or [])
        self.directory = tempfile.mkdtemp(prefix=f"qless-{self.kind}-cluster-")
        self._nodes: list[ClusterNode] = []
        self.startup_seconds = 0.0
        # Runs on stop(), on garbage collection and at interpreter exit, whichever is first.
        self._finalizer = weakref.finalize(self, _cleanup, self._nodes, self.directory)

    # -- life cycle -------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> LocalCluster:
        """Start every node, create the cluster and wait until it is ok and in sync."""
        started = time.monotonic()
        deadline = started + timeout
        try:
            count = self.n_primaries * (1 + self.n_replicas)
            taken: set[int] = set()
            for _ in range(count):
                self._spawn(self._new_node(), taken, deadline)
            for node in self._nodes:
                node.node_id = str(until(deadline, _myid_of(node), "node id"))
            self._create(deadline)
            self.wait_settled(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self) -> None:
        """Kill every node and remove the temp dir."""
        self._finalizer()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _new_node(self) -> ClusterNode:
        """Return a new, not yet started node with a directory of its own."""
        prefix = f"node-{len(self._nodes)}-"
        node = ClusterNode(0, tempfile.mkdtemp(prefix=prefix, dir=self.directory))
        self._nodes.append(node)
        return node

    def _launch(self, node: ClusterNode) -> None:
        """Start the server process of `node` with this cluster's settings."""
        node.launch(self.binary, self.node_timeout_ms, self.extra_args)

    def _spawn(self, node: ClusterNode, taken: set[int], deadline: float) -> None:
        """Start `node` on a fresh free port pair (see `spawn`)."""
        spawn(node, self.binary, self.node_timeout_ms, self.extra_args, taken, deadline)

    def _create(self, deadline: float) -> None:
        """Join the nodes with `<cli> --cluster create` (first N become the primaries)."""
        cmd = [
            self.cli, "--cluster", "create", *(n.address for n in self._nodes),
            "--cluster-replicas", str(self.n_replicas), "--cluster-yes",
        ]
        done = subprocess.run(
            cmd, capture_output=True, text=True, check=False,
            timeout=max(1.0, deadline - time.monotonic()),
        )
        if done.returncode != 0:
            raise RuntimeError(f"cluster create failed: {done.stdout[-2000:]} {done.stderr}")

    # -- looking at it ----------------------------------------------------------------

    def nodes(self) -> list[ClusterNode]:
        """Return every node we started, running or not, in start order."""
        return list(self._nodes)

    def running(self) -> list[ClusterNode]:
        """Return the nodes whose process is alive."""
        return [n for n in self._nodes if n.running]

    def node(self, port: int) -> ClusterNode:
        """Return our node listening on `port`."""
        for n in self._nodes:
            if n.port == port:
                return n
        raise KeyError(port)

    def view(self) -> ClusterView:
        """Return the cluster as the first running node sees it (roles and slot owners)."""
        return read_view(self.running()[0].conn())

    def primaries(self) -> list[ClusterNode]:
        """Return the running primaries (including any left without slots)."""
        view = self.view()
        return [n for n in self.running() if view.primary_of.get(n.port, 0) is None]

    def replicas(self, of: ClusterNode | None = None) -> list[ClusterNode]:
        """Return the running replicas, or those of primary `of`."""
        view = self.view()
        return [
            n for n in self.running()
            if view.primary_of.get(n.port) is not None
            and (of is None or view.primary_of[n.port] == of.port)
        ]

    @staticmethod
    def slot_for_key(key: str | bytes) -> int:
        """Return the hash slot of `key` (the part in {braces} when there is one)."""
        return int(key_slot(key.encode() if isinstance(key, str) else key))

    def primary_for_slot(self, slot: int) -> ClusterNode:
        """Return the primary that owns `slot` now."""
        return self.node(self.view().owner(slot))

    def primary_for_key(self, key: str | bytes) -> ClusterNode:
        """Return the primary that owns `key`'s slot now."""
        return self.primary_for_slot(self.slot_for_key(key))

    def client(self, **kwargs: Any) -> RedisCluster:
        """Return a redis-py cluster client (decoded replies, 2 s socket timeouts, so a
        frozen node does not hang it) started from our nodes."""
        kwargs.setdefault("decode_responses", True)
        kwargs.setdefault("socket_timeout", 2.0)
        kwargs.setdefault("socket_connect_timeout", 2.0)
        nodes = [_RedisPyNode("127.0.0.1", n.port) for n in self.running()]  # type: ignore[no-untyped-call, unused-ignore]
        return RedisCluster(startup_nodes=nodes, **kwargs)

    def wait_settled(
        self, timeout: float = 30.0, check: Callable[[ClusterView], bool] | None = None
    ) -> ClusterView:
        """Wait until every running node says cluster_state:ok, all agree on roles and slot
        owners, every replica's link is up and synced, and `check` (if given) holds."""
        deadline = time.monotonic() + timeout

        def settled() -> ClusterView | None:
            view = self._agreed_view()
            return view if view is not None and (check is None or check(view)) else None

        try:
            return until(deadline, settled, "the cluster to settle")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; {self.describe()}") from None

    def describe(self) -> str:
        """Return each node's state in one line (for error messages)."""
        return describe(self._nodes)

    def _agreed_view(self) -> ClusterView | None:
        """Return the view every running node shares, when the cluster is whole and synced."""
        live = self.running()
        ports = {n.port for n in live}
        views = []
        for node in live:
            try:
                if "cluster_state:ok" not in node.call("CLUSTER", "INFO"):
                    return None
                view = read_view(node.conn())
                role = node.call("ROLE")
            except redis.RedisError:
                return None
            if not view.healthy(ports) or (role[0] != "master" and role[3] != "connected"):
                return None
            views.append(view.restricted(ports))
        if not views or any(v != views[0] for v in views[1:]):
            return None
        return views[0] if views[0].covers_all(ports) else None

    # -- operations for fault tests ---------------------------------------------------

    def kill_primary(self, node: ClusterNode, timeout: float = 30.0) -> ClusterNode:
        """SIGKILL primary `node`, wait until one of its replicas took over its slots and the
        cluster is ok again; return the promoted replica."""
        return self._take_over(node, kill_node, timeout)

    def freeze(self, node: ClusterNode, timeout: float = 30.0) -> ClusterNode:
        """SIGSTOP primary `node` (a hung server: alive, silent), wait until one of its
        replicas took over; return that replica. `thaw` brings it back."""

        def stop(n: ClusterNode) -> None:
            n.frozen = True
            if n.process is not None:
                n.process.send_signal(signal.SIGSTOP)

        return self._take_over(node, stop, timeout)

    def thaw(self, node: ClusterNode, timeout: float = 30.0) -> ClusterView:
        """SIGCONT a frozen `node` and wait until it is back (a former primary whose slots
        were taken over rejoins as a replica, dropping what only it had)."""
        if node.process is not None:
            node.process.send_signal(signal.SIGCONT)
        node.frozen = False
        return self.wait_settled(timeout)

    def _take_over(
        self, node: ClusterNode, stop: Callable[[ClusterNode], None], timeout: float
    ) -> ClusterNode:
        """Stop primary `node` with `stop`; wait until one of its replicas owns its slots."""
        view = self.view()
        if view.primary_of.get(node.port, 0) is not None:
            raise ValueError(f"{node!r} is not a primary")
        heirs = {n.port for n in self.replicas(of=node)}
        if not heirs:
            raise ValueError(f"{node!r} has no replica to take over")
        slots = view.slots_of(node.port)
        stop(node)

        def promoted(v: ClusterView) -> bool:
            owners = {v.owner(s) for ends in slots for s in ends}
            return len(owners) == 1 and owners <= heirs

        after = self.wait_settled(timeout, promoted)
        return self.node(after.owner(slots[0][0])) if slots else self.node(min(heirs))

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL `node` (any role) and return at once, without waiting for the cluster."""
        kill_node(node)

    def restart(self, node: ClusterNode, timeout: float = 30.0) -> ClusterView:
        """Start `node` again on its port (killing it first if it runs), with its nodes.conf,
        and wait until it is back in the cluster (a former primary rejoins as a replica)."""
        kill_node(node)
        if not (port_free(node.port) and port_free(node.port + BUS_OFFSET)):
            raise RuntimeError(f"port {node.port} or its bus port was taken meanwhile")
        self._launch(node)
        deadline = time.monotonic() + timeout
        until(deadline, lambda: ping(node), f"{node.address} to answer PING")
        return self.wait_settled(max(1.0, deadline - time.monotonic()))

    def heal(self, timeout: float = 60.0) -> ClusterView:
        """Restart every node that is down and wait until the cluster is whole and synced."""
        deadline = time.monotonic() + timeout
        for node in self._nodes:
            if node.frozen:
                self.thaw(node, max(1.0, deadline - time.monotonic()))
            elif not node.running:
                self.restart(node, max(1.0, deadline - time.monotonic()))
        return self.wait_settled(max(1.0, deadline - time.monotonic()))

    def add_node(self, replica_of: ClusterNode | None = None, timeout: float = 30.0) -> ClusterNode:
        """Start a new node and join it (CLUSTER MEET): a primary without slots (move some
        with migrate_slot), or a replica of primary `replica_of`, synced on return."""
        deadline = time.monotonic() + timeout
        members = self.running()
        node = self._new_node()
        self._spawn(node, {n.port for n in self._nodes}, deadline)
        node.node_id = until(deadline, _myid_of(node), "node id")
        # Every member meets it directly: quicker than waiting for gossip to spread it.
        for member in members:
            member.call("CLUSTER", "MEET", "127.0.0.1", node.port)
        if replica_of is not None:
            # A node can only replicate a primary it knows by id (handshakes use a temp id).
            until(deadline, lambda: replica_of.node_id in node.call("CLUSTER", "NODES") or None,
                  f"{node.address} to learn of {replica_of.address}")
            node.call("CLUSTER", "REPLICATE", replica_of.node_id)
        want = None if replica_of is None else replica_of.port
        self.wait_settled(
            max(1.0, deadline - time.monotonic()),
            lambda v: node.port in v.primary_of and v.primary_of[node.port] == want,
        )
        return node

    def remove_node(self, node: ClusterNode, timeout: float = 30.0) -> None:
        """Take `node` out for good: stop it, CLUSTER FORGET it on every other node, delete
        its directory. It must own no slots and have no replicas."""
        view = self.view()
        if view.slots_of(node.port) or node.port in view.primary_of.values():
            raise ValueError(f"{node!r} still owns slots or has replicas")
        kill_node(node)
        # Forgotten only after it stopped: alive, it would announce itself again.
        for other in self.running():
            other.call("CLUSTER", "FORGET", node.node_id)
        self._nodes.remove(node)
        shutil.rmtree(node.directory, ignore_errors=True)
        self.wait_settled(timeout)

    def failover(self, replica: ClusterNode, timeout: float = 30.0, force: bool = False) -> None:
        """Make `replica` the primary of its shard with CLUSTER FAILOVER and wait for it."""
        if self.view().primary_of.get(replica.port) is None:
            raise ValueError(f"{replica!r} is not a replica")
        args = ["CLUSTER", "FAILOVER", *(["FORCE"] if force else [])]
        replica.call(*args)
        self.wait_settled(timeout, lambda v: v.primary_of.get(replica.port, 0) is None)

    def migrate_slot(
        self,
        slot: int,
        to: ClusterNode,
        batch: int = 100,
        timeout: float = 60.0,
        on_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Move `slot` to primary `to` (IMPORTING/MIGRATING, MIGRATE in batches, SETSLOT
        NODE everywhere) while clients keep working; return how many keys moved.

        `on_batch(moved_so_far)` runs after each MIGRATE, while the slot is half moved (keys
        on both sides, clients redirected with ASK): tests act there deterministically.
        """
        source = self.primary_for_slot(slot)
        if source is to:
            return 0
        if to not in self.primaries():
            raise ValueError(f"{to!r} is not a primary")
        deadline = time.monotonic() + timeout
        others = [n for n in self.primaries() if n is not to and n is not source]
        moved = move_slot(slot, source, to, others, batch, deadline, on_batch)
        self.wait_settled(
            max(1.0, deadline - time.monotonic()), lambda v: v.owner(slot) == to.port
        )
        return moved

    def flush(self) -> None:
        """Empty every primary: keys, scripts and functions (replicas follow)."""
        for node in self.primaries():
            node.call("FLUSHALL")
            node.call("SCRIPT", "FLUSH")
            try:
                node.call("FUNCTION", "FLUSH")
            except redis.ResponseError as exc:
                if "unknown command" not in str(exc).lower():  # Redis 6.2 has no functions
                    raise


def _myid_of(node: ClusterNode) -> Callable[[], str | None]:
    """Return a probe for `node`'s id (a closure, so each node gets its own)."""
    return lambda: myid(node)
