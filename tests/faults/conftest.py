"""Fault-injection harness: a private TCP Redis with AOF, a reply-dropping proxy, a SQLite
ledger outside the queue keys, real worker subprocesses, and the auditor at the end.

Every test here is `@pytest.mark.fault` with a hard timeout. Redis listens on 127.0.0.1 at a
free port of our own (never another server); the unix-socket session server of
tests/conftest.py is not used, because these tests restart, pause and proxy Redis.
"""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from django_qless.core.audit import audit
from django_qless.core.client import Client
from tests.helpers import (  # noqa: F401 - re-exported
    WorkerProcess,
    alive,
    children_of,
    free_port,
    wait_until,
)
from testservers.redis_server import RedisServer, find_redis_server

ROOT = Path(__file__).resolve().parents[2]
LEDGER_ENV = "QLESS_FAULT_LEDGER"










def assert_audit_clean(conn: Client | redis.Redis) -> None:
    """Every fault test ends here: the invariants of docs/faults.md hold."""
    report = audit(conn)
    assert report.ok, str(report)


# ---------------------------------------------------------------------------- Redis

class TcpRedis:
    """A private redis-server on 127.0.0.1:<free port>, AOF always, restartable in place."""

    def __init__(self, directory: Path, aof: bool = True) -> None:
        self.directory = directory
        self.port = free_port()
        self.args = ["--appendonly", "yes", "--appendfsync", "always"] if aof else []
        self.server: RedisServer | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> TcpRedis:
        self.server = RedisServer(find_redis_server(), directory=str(self.directory),
                                  extra_args=self.args, port=self.port).start()
        return self

    def conn(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True, **kwargs)

    def crash(self) -> None:
        """SHUTDOWN NOSAVE: the process dies without a final save (AOF keeps what it logged)."""
        c = self.conn()
        try:
            c.shutdown(nosave=True)
        except redis.ConnectionError:
            pass
        assert self.server is not None and self.server.process is not None
        self.server.process.wait(timeout=10)
        self.server = None

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


@pytest.fixture
def tcp_redis(tmp_path: Path) -> Iterator[TcpRedis]:
    """A fresh private TCP Redis with AOF `always` for one test."""
    d = tmp_path / "redis"
    d.mkdir()
    server = TcpRedis(d).start()
    yield server
    server.stop()


@pytest.fixture
def rconn(tcp_redis: TcpRedis) -> Iterator[redis.Redis]:
    c = tcp_redis.conn()
    yield c
    c.close()


@pytest.fixture
def qless_url(tcp_redis: TcpRedis) -> str:
    """The TCP Redis: `qless_client` and `short_leases` (tests/conftest.py) use it here."""
    return tcp_redis.url


# ---------------------------------------------------------------------------- proxy

class Proxy:
    """A threaded TCP proxy; can drop a connection after forwarding a matching request
    but before its reply (lost ack), or go silent without closing (half-open)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.drop_reply_to: bytes | None = None
        self.frozen: set[int] = set()  # ids of connections that went quiet (half-open)
        self.freeze_new = False
        self.dropped = 0
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while not self._stop:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.upstream_port))
            state: dict[str, Any] = {"swallow": False, "id": len(self._pairs)}
            if self.freeze_new:
                self.frozen.add(state["id"])
            self._pairs.append((down, up))
            threading.Thread(target=self._requests, args=(down, up, state), daemon=True).start()
            threading.Thread(target=self._replies, args=(up, down, state), daemon=True).start()

    def freeze(self, new_too: bool = False) -> None:
        """Stop forwarding on every open connection without closing it (half-open); with
        `new_too`, connections made later are accepted and then stay silent as well."""
        self.frozen |= set(range(len(self._pairs)))
        self.freeze_new = new_too

    def _wait_thaw(self, state: dict[str, Any]) -> None:
        while state["id"] in self.frozen and not self._stop:
            time.sleep(0.01)

    def _requests(self, down: socket.socket, up: socket.socket, state: dict[str, Any]) -> None:
        try:
            while data := down.recv(65536):
                self._wait_thaw(state)
                pattern = self.drop_reply_to
                if pattern is not None and pattern in data:
                    self.drop_reply_to = None
                    state["swallow"] = True
                up.sendall(data)
        except OSError:
            pass
        if not state["swallow"]:
            self._close(down, up)

    def _replies(self, up: socket.socket, down: socket.socket, state: dict[str, Any]) -> None:
        try:
            while data := up.recv(65536):
                self._wait_thaw(state)
                if state["swallow"]:
                    # The server ran the command; its reply never reaches the client.
                    self.dropped += 1
                    break
                down.sendall(data)
        except OSError:
            pass
        self._close(down, up)

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._stop = True
        self.listener.close()
        for down, up in self._pairs:
            self._close(down, up)


@pytest.fixture
def proxy(tcp_redis: TcpRedis) -> Iterator[Proxy]:
    p = Proxy(tcp_redis.port)
    yield p
    p.close()


# ---------------------------------------------------------------------------- ledger

class Ledger:
    """A SQLite ledger in tmp (outside Redis): (jid, attempt, worker, pid, event, t)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        db = self.db()
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE IF NOT EXISTS ledger (jid TEXT, attempt INTEGER, worker TEXT,"
                   " pid INTEGER, event TEXT, t REAL, extra TEXT)")
        db.execute("CREATE TABLE IF NOT EXISTS effects (jid TEXT PRIMARY KEY, pid INTEGER)")
        db.commit()
        db.close()

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=60)

    def rows(self, event: str | None = None, jid: str | None = None) -> list[dict[str, Any]]:
        db = self.db()
        try:
            cur = db.execute("SELECT jid, attempt, worker, pid, event, t, extra FROM ledger")
            names = [c[0] for c in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        finally:
            db.close()
        return [r for r in rows if (event is None or r["event"] == event)
                and (jid is None or r["jid"] == jid)]

    def effects(self) -> int:
        db = self.db()
        try:
            return int(db.execute("SELECT COUNT(*) FROM effects").fetchone()[0])
        finally:
            db.close()


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    path = tmp_path / "ledger.sqlite3"
    monkeypatch.setenv(LEDGER_ENV, str(path))
    return Ledger(path)


# ---------------------------------------------------------------------------- workers

def fault_worker(url: str, args: list[str], tmp: Path) -> WorkerProcess:
    """Start a CLI worker with the jobs of tests.faults.jobs (stdout dropped)."""
    return WorkerProcess(url, args, tmp, jobs_module="tests.faults.jobs", capture_stdout=False,
                         wait_timeout=20.0, children_timeout=15.0)


@pytest.fixture
def start_worker(tcp_redis: TcpRedis, tmp_path: Path, ledger: Ledger
                 ) -> Iterator[Callable[..., WorkerProcess]]:
    """Start CLI workers against the TCP Redis; each one's session is killed at teardown."""
    started: list[WorkerProcess] = []

    def start(*args: str, url: str | None = None) -> WorkerProcess:
        worker = fault_worker(url or tcp_redis.url, list(args), tmp_path)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill_all()
