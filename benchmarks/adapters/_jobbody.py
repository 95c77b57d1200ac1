"""Record that a benchmark job body ran: one line per job in a per-process file.

Stdlib only: this module is imported by the job modules of every system, inside each
system's own virtualenv. A line is ``<time.time()> <t0>`` where ``t0`` is the put time the
job carried (0 when none), so latency is the difference and throughput uses the first column.
Files avoid adding Redis commands to the cost being measured.
"""

from __future__ import annotations

import os
import time

__all__ = ["record"]

_fd: dict[int, int] = {}


def record(t0: float = 0.0) -> None:
    """Append this job's completion line to the current process's file."""
    now = time.time()
    pid = os.getpid()
    fd = _fd.get(pid)
    if fd is None:
        directory = os.environ["BENCH_TS_DIR"]
        path = os.path.join(directory, f"{pid}.ts")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        _fd[pid] = fd
    os.write(fd, f"{now:17.6f} {t0:17.6f}\n".encode())
