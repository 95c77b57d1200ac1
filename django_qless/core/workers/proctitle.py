"""Process titles (`ps`, `top`, /proc/<pid>/cmdline) that say what each worker process does."""

from __future__ import annotations

from collections.abc import Sequence

from setproctitle import setproctitle

from django_qless.core.workers.shutdown import SignalState

__all__ = ["child_title", "set_title", "stop_note", "supervisor_title"]

_last = ""


def set_title(title: str) -> None:
    """Set this process's title."""
    global _last
    if title != _last:  # the idle title is asked for on every wait: skip the system call
        _last = title
        setproctitle(title)


def stop_note(signals: SignalState) -> str:
    """Say how a process stops: `draining (12s left)`, `draining`, `stopping` or ''."""
    if signals.draining:
        left = signals.drain_left()
        return "draining" if left is None else f"draining ({left:.0f}s left)"
    return "stopping" if signals.stop_requests else ""


def supervisor_title(
    queues: Sequence[str], alive: int, wanted: int, paused: bool, done: int, failed: int,
    note: str = "",
) -> str:
    """Return the supervisor's title (`note`: see stop_note)."""
    return (f"qless_worker: supervisor queues={','.join(queues) or '-'} "
            f"children={alive}/{wanted} paused={'yes' if paused else 'no'} done={done} "
            f"failed={failed}" + (f", {note}" if note else ""))


def child_title(
    name: str, queues: Sequence[str], *, jid: str | None = None, klass: str | None = None,
    queue: str | None = None, elapsed: float = 0.0, paused: bool = False, note: str = "",
) -> str:
    """Return a job-running process's title: running (`note`: see stop_note), idle or paused."""
    if jid is not None:
        return (f"qless_worker[{name}]: running {jid[:4]}.. {klass} q={queue} {elapsed:.1f}s"
                + (f", {note}" if note else ""))
    if paused:
        return f"qless_worker[{name}]: paused"
    return f"qless_worker[{name}]: idle waiting on {','.join(queues) or '-'}"
