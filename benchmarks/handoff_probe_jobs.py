"""The job module of handoff_latency.py: a no-op job plus timestamps along the hand-off path.

Imported by the worker (`--import handoff_probe_jobs`) before it forks, so the patches below
hold in every child. A child's stamps (`time.monotonic()`, one clock for every process on
Linux) start when its poll() returns with something readable and are kept in memory; the job
body writes one line per job to `<HANDOFF_TS_DIR>/<pid>`: the jid, the put time the job
carried, `poll_in` (when the wait began) and each stamp as `name=time`. Nothing here talks
to Redis, so the cost measured is the worker's own.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from django_qless.core.registry import register
from django_qless.core.workers import (
    base,
    child,
    hand,
    heartbeat,
    leadership,
    runner,
    taking,
    wakeup,
)

__all__ = ["probe"]

_mono = time.monotonic
_state: dict[str, Any] = {"poll_in": 0.0, "fd": None}
_marks: list[tuple[str, float]] = []


def _mark(name: str) -> None:
    _marks.append((name, _mono()))


def _after(owner: Any, attr: str, name: str) -> None:
    """Stamp `name` when owner.attr returns."""
    fn: Callable[..., Any] = getattr(owner, attr)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            _mark(name)

    setattr(owner, attr, wrapped)


def _before(owner: Any, attr: str, name: str) -> None:
    """Stamp `name` when owner.attr is called."""
    fn: Callable[..., Any] = getattr(owner, attr)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        _mark(name)
        return fn(*args, **kwargs)

    setattr(owner, attr, wrapped)


def _patch() -> None:
    poll = wakeup.poll_readable

    def timed_poll(fds: list[int], timeout: float) -> set[int]:
        _state["poll_in"] = _mono()
        ready = poll(fds, timeout)
        if ready:
            _marks.clear()
            _mark("poll_out")
        return ready

    wakeup.poll_readable = timed_poll
    _after(taking.JobTaker, "idle", "idle_ret")
    # The loop's checks between `idle` returning and the token (each stamp costs ~1 us).
    _after(base.JobLoop, "_limit_reached", "limit")
    _after(child.ForkChild, "should_continue", "alive")
    _after(hand.JobHand, "take", "took")
    _after(hand.JobHand, "flush_kept", "kept")
    _after(child.ForkChild, "between_jobs", "between")
    _after(taking.JobTaker, "await_turn", "turn")
    _after(wakeup.WakeWaiter, "ensure_subscribed", "subscribed")
    _before(wakeup.WakeWaiter, "drain", "drain_in")
    _after(wakeup.WakeWaiter, "_keep_handed", "decoded")
    _after(taking.JobTaker, "reserve", "reserved")
    _before(base.JobLoop, "_perform", "perform")
    _after(leadership.Leadership, "release", "released")
    _after(child.ForkChild, "on_job_start", "reported")
    _after(heartbeat.Heartbeater, "watch", "watched")
    _before(runner.JobRunner, "run", "run")


_patch()


@register("probe.noop")
def probe(job: Any) -> None:
    """Write this job's stamps to this process's file."""
    _mark("body")
    fd = _state["fd"]
    if fd is None:
        path = os.path.join(os.environ["HANDOFF_TS_DIR"], str(os.getpid()))
        fd = _state["fd"] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    marks = " ".join(f"{n}={t:.6f}" for n, t in _marks)
    t0 = float(job.data.get("t0", 0.0))
    line = f"{job.jid} t0={t0:.6f} poll_in={_state['poll_in']:.6f} {marks}\n"
    os.write(fd, line.encode())
    nap = float(job.data.get("nap", 0.0))
    if nap:
        time.sleep(nap)  # (a burst: keeps this child busy while the others start theirs)
