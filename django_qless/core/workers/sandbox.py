"""A private scratch directory per job-running process, emptied around every job."""

from __future__ import annotations

import logging
import os
import shutil

__all__ = ["Sandbox", "current_sandbox", "set_current_sandbox"]

log = logging.getLogger("django_qless.worker")


class Sandbox:
    """`<root>/<worker name>`: empty when a job first asks for it, removed after the job.

    Created on first use (`current_sandbox()` / `job.sandbox`), so jobs that never touch it
    cost no file-system work on the hot path. The worker never changes directory into it.
    """

    def __init__(self, root: str, worker_name: str) -> None:
        self.path = os.path.join(root, worker_name)
        self._created = False
        # A crashed predecessor with the same (stable) name may have left files behind.
        self._remove()

    def get(self) -> str:
        """Return the sandbox directory, creating it empty on first use in a job."""
        if not self._created:
            if os.path.lexists(self.path):
                self._remove()
            os.makedirs(self.path, mode=0o700, exist_ok=True)
            self._created = True
        return self.path

    def cleanup(self) -> None:
        """Remove the sandbox directory and everything in it (after each job)."""
        if self._created:
            self._remove()
            self._created = False

    def _remove(self) -> None:
        def onerror(*args: object) -> None:
            log.warning("sandbox %s: could not remove %s", self.path, args[1])

        if os.path.lexists(self.path):
            shutil.rmtree(self.path, onerror=onerror)


# One job runs per process at a time; a plain holder (not thread-local) lets threads the
# job starts find its sandbox too.
_current: dict[str, Sandbox | None] = {"sandbox": None}


def set_current_sandbox(sandbox: Sandbox | None) -> None:
    """Make `sandbox` the one `current_sandbox()` returns (the worker calls this)."""
    _current["sandbox"] = sandbox


def current_sandbox() -> str | None:
    """Return the running job's sandbox directory (empty at job start), or None."""
    sandbox = _current["sandbox"]
    return None if sandbox is None else sandbox.get()
