"""The worker's health file, and the probe orchestrators run against it.

With `--health-file PATH` (or `QLESS["WORKER"]["HEALTH_FILE"]`) the serial worker or the
forking supervisor rewrites PATH every few seconds with its state and the time, without any
Redis call of its own; a stuck or dead worker stops rewriting it. Kubernetes, Docker or
systemd run the checker as an exec probe:

    python -m django_qless.core.probe PATH --max-age 30            # liveness
    python -m django_qless.core.probe PATH --max-age 30 --ready    # readiness

It exits 0 or 1 with one line. This module imports nothing beyond the standard library: the
probe runs every few seconds, and loading the worker package would cost it a third of a
second.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = ["PERIOD", "STATES", "HealthBeat", "HealthFile", "check", "main", "start_beat",
           "state_of"]

log = logging.getLogger("django_qless.worker")

#: What the file says, in the order a worker's life goes through them.
STATES = ("starting", "ready", "paused", "draining", "stopping")
#: Seconds between two writes while the state stays the same (a change is written at once).
PERIOD = 5.0


class _Flags(Protocol):
    """What a worker's signal state tells (SignalState)."""

    stop_requests: int
    paused: bool

    @property
    def draining(self) -> bool: ...


def state_of(flags: _Flags, serving: bool = True) -> str:
    """Return the state of a worker with these signal flags (`serving`: it can take jobs,
    e.g. a supervisor has a child)."""
    if flags.draining:
        return "draining"  # finishing its running jobs, taking no new one (QUIT, TERM's grace)
    if flags.stop_requests:
        return "stopping"
    if not serving:
        return "starting"
    return "paused" if flags.paused else "ready"


class HealthFile:
    """Write a worker's state and the time to a file, atomically, every PERIOD seconds."""

    def __init__(self, path: str, worker: str = "", period: float = PERIOD) -> None:
        self.path = path
        self.worker = worker
        self.period = period
        self._state = ""
        self._written = 0.0
        self._failed = False

    def beat(self, state: str) -> None:
        """Write `state` if it changed or the last write is PERIOD seconds old."""
        now = time.monotonic()
        if state != self._state or now - self._written >= self.period:
            self.write(state)
            self._written = now

    def write(self, state: str) -> None:
        """Replace the file's content (a reader never sees half a file); never raise."""
        self._state = state
        record = {"state": state, "time": round(time.time(), 3), "pid": os.getpid(),
                  "worker": self.worker}
        temporary = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(temporary, "w") as fh:
                fh.write(json.dumps(record) + "\n")
            os.replace(temporary, self.path)
        except OSError as exc:
            if not self._failed:  # once: the worker carries on without its probe
                log.error("cannot write the health file %s: %s", self.path, exc)
            self._failed = True
        else:
            self._failed = False

    def remove(self) -> None:
        """Delete the file (the worker is leaving)."""
        try:
            os.unlink(self.path)
        except OSError:
            pass


class HealthBeat(threading.Thread):
    """Keep a health file fresh from a thread, for a process whose main thread runs jobs."""

    def __init__(self, health: HealthFile, state: Callable[[], str], tick: float = 1.0) -> None:
        super().__init__(name="qless-health", daemon=True)
        self.health = health
        self.state = state
        self.tick = tick  # how soon a change of state is written
        self._halt = threading.Event()

    def run(self) -> None:
        from django_qless.core.engine.pubsub import block_async_signals

        block_async_signals()
        while True:
            self.health.beat(self.state())
            if self._halt.wait(self.tick):
                return

    def stop(self) -> None:
        """Stop writing and delete the file."""
        self._halt.set()
        if self.is_alive():
            self.join()
        self.health.remove()


def start_beat(path: str | None, worker: str, flags: _Flags) -> HealthBeat | None:
    """Start keeping `path` fresh with the state of `flags` (None: no health file asked for)."""
    if not path:
        return None
    beat = HealthBeat(HealthFile(path, worker), lambda: state_of(flags))
    beat.start()
    return beat


def check(path: str, max_age: float, ready: bool) -> tuple[bool, str]:
    """Tell whether the worker writing `path` is alive (and with `ready`, ready); say why."""
    try:
        with open(path) as fh:
            record: Any = json.loads(fh.read())
        state, written = str(record["state"]), float(record["time"])
    except FileNotFoundError:
        return False, f"no health file at {path}: the worker is not running, or not started"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"cannot read the health file {path}: {exc}"
    age = time.time() - written
    who = f"worker {record.get('worker') or '?'} (pid {record.get('pid', '?')})"
    if age > max_age:
        return False, f"{who} is stale: last heard {age:.0f}s ago ({state}), more than {max_age:g}s"
    if ready and state != "ready":
        return False, f"{who} is alive but not ready: {state}"
    return True, f"{who} is {state} ({age:.1f}s ago)"


def main(argv: Sequence[str] | None = None) -> int:
    """Check a health file; exit 0 (alive, or ready with --ready) or 1, printing one line."""
    parser = argparse.ArgumentParser(
        prog="python -m django_qless.core.probe",
        description="Check a qless worker's health file (exit 0: alive; 1: not).")
    parser.add_argument("path", help="the worker's --health-file")
    parser.add_argument("--max-age", type=float, default=30.0, metavar="SECONDS",
                        help="the file must be at most this old (default 30)")
    parser.add_argument("--ready", action="store_true",
                        help="also require the state 'ready' (a readiness probe)")
    args = parser.parse_args(argv)
    if not args.max_age > 0:
        parser.error("argument --max-age: must be > 0")
    ok, message = check(args.path, args.max_age, args.ready)
    print(message, file=sys.stdout if ok else sys.stderr)  # noqa: T201 - the probe's answer
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
