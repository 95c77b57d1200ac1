"""Small helpers shared by the worker, fault and app suites."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

__all__ = ["alive", "children_of", "client_at", "free_port", "wait_until"]


def wait_until(cond: Callable[[], Any], timeout: float = 10.0, step: float = 0.01) -> Any:
    """Poll `cond` until it returns something truthy; fail the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {cond}")
        time.sleep(step)


def alive(pid: int) -> bool:
    """Tell whether `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def free_port() -> int:
    """Return a loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children_of(pid: int) -> list[int]:
    """Return the pids whose parent is `pid` (from /proc)."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised command, which may contain spaces.
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[1]) == pid:
            kids.append(int(entry))
    return sorted(kids)


def client_at(conn: Any, when: float, worker: str = "w1") -> Any:
    """Return a core Client whose engine calls carry `when` as the time (a fixed test clock)."""
    import inspect

    from django_qless.core import Client

    # The clock hook is `clock` or, where the engine judges leases by the server's clock
    # unless told otherwise, the testing-only `_clock`.
    hook = "_clock" if "_clock" in inspect.signature(Client).parameters else "clock"
    return Client(conn, worker_name=worker, **{hook: lambda: when})
