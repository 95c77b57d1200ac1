"""Record that a benchmark job body ran: one line per job in a per-process file.

Stdlib (+ redis-py for the "incr" body) only: this module is imported by the job modules of
every system, inside each system's own virtualenv. A line is ``<time.time()> <t0>`` where
``t0`` is the put time the job carried (0 when none), so latency is the difference and
throughput uses the first column. Files avoid adding Redis commands to the cost measured.

The job body is chosen by ``BENCH_BODY`` in the worker's environment: ``noop`` (only the
line) or ``incr`` (the line, then one INCR of ``bench:body`` on ``BENCH_REDIS_URL`` over a
per-process connection: the "one INCR" job of the capacity table, one Redis command a job).
"""

from __future__ import annotations

import os
import time
from typing import Any

__all__ = ["record"]

_fd: dict[int, int] = {}
_conn: dict[int, Any] = {}


def _incr(pid: int) -> None:
    conn = _conn.get(pid)
    if conn is None:
        import redis

        conn = _conn[pid] = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    conn.incr("bench:body")


def record(t0: float = 0.0) -> None:
    """Append this job's start line to the current process's file; then run the body."""
    now = time.time()
    pid = os.getpid()
    fd = _fd.get(pid)
    if fd is None:
        directory = os.environ["BENCH_TS_DIR"]
        path = os.path.join(directory, f"{pid}.ts")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        _fd[pid] = fd
    os.write(fd, f"{now:17.6f} {t0:17.6f}\n".encode())
    if os.environ.get("BENCH_BODY") == "incr":
        _incr(pid)
