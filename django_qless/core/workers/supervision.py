"""What the supervisor tracks per child."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django_qless.core.workers.channels import HeardAborts

__all__ = ["ChildProc"]


@dataclass
class ChildProc:
    """What the supervisor knows about one child."""

    slot: int
    pid: int
    name: str
    status_fd: int
    started: float = field(default_factory=time.monotonic)
    jid: str | None = None
    token: str | None = None  # the attempt token of `jid`'s pop (see attempts_still_owned)
    klass: str | None = None
    queue: str | None = None
    job_started: float = 0.0
    limit: float = 0.0  # `jid`'s hard time limit in seconds (0: none), from its start line
    kill_reason: str | None = None
    term_sent: float = 0.0
    left: str | None = None  # why the child says it leaves on its own (status line `x`)
    buffer: bytes = b""
    go_fd: int = -1  # the pipe that lets the child take jobs, until written (see listening)
    unsure: bool = False  # its job started while its channel may not have been heard
    # Abort events heard for jobs it had not reported starting (popped, or held ahead).
    aborted: HeardAborts = field(default_factory=HeardAborts)
