"""`--exec`: run an external command for each job instead of Python code.

The job's data (its JSON text, verbatim) goes to the command's stdin and the jid is appended
as the last argument. Exit status 0 completes the job; anything else fails it with the tail of
stderr. A per-job time limit kills the command (TERM, then KILL after the grace period).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING

from django_qless.core.workers.runner import current_sandbox

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["ExecFailed", "ExecRunner", "ExecTimeout"]

_TAIL = 8192


class ExecFailed(Exception):
    """The command exited with a non-zero status."""


class ExecTimeout(Exception):
    """The command ran past the time limit and was killed."""


class ExecRunner:
    """Callable job target that runs `command ... <jid>` with the job data on stdin."""

    def __init__(self, command: Sequence[str], timeout: float = 0.0, grace: float = 5.0) -> None:
        if not command:
            raise ValueError("exec mode needs a command")
        self.command = tuple(command)
        self.timeout = timeout
        self.grace = grace

    @staticmethod
    def timed_out(exc: BaseException) -> bool:
        """Tell whether `exc` says the command ran past the time limit."""
        return isinstance(exc, ExecTimeout)

    @staticmethod
    def failed(exc: BaseException) -> bool:
        """Tell whether `exc` is the command's own failure (or time-out), not the worker's."""
        return isinstance(exc, (ExecTimeout, ExecFailed))

    def __call__(self, job: Job) -> None:
        env = dict(os.environ)
        env.update(
            QLESS_JID=job.jid,
            QLESS_QUEUE=job.queue_name,
            QLESS_KLASS=job.klass_name,
            QLESS_WORKER=str(job.worker_name or ""),
        )
        sandbox = current_sandbox()
        if sandbox is not None:
            env["QLESS_SANDBOX"] = sandbox
        proc = subprocess.Popen(
            [*self.command, job.jid],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        try:
            _, err = proc.communicate(
                job.raw_data.encode("utf-8"), timeout=self.timeout or None
            )
        except subprocess.TimeoutExpired:
            _kill(proc, self.grace)
            raise ExecTimeout(
                f"{self.command[0]} exceeded the time limit of {self.timeout:g}s and was killed"
            ) from None
        except BaseException:
            # The job is being aborted (shutdown, lock lost): do not leave the command behind.
            _kill(proc, 0.0)
            raise
        if proc.returncode != 0:
            tail = err[-_TAIL:].decode("utf-8", "replace")
            raise ExecFailed(f"{self.command[0]} exited with status {proc.returncode}\n{tail}")


def _kill(proc: subprocess.Popen[bytes], grace: float) -> None:
    """TERM the command's process group, then KILL it after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if grace <= 0 and sig == signal.SIGTERM:
            continue
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
