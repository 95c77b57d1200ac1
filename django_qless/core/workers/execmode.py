"""`--exec`: run an external command for each job instead of Python code.

The job's data (its JSON text, verbatim) goes to the command's stdin and the jid is appended
as the last argument. Exit status 0 completes the job; anything else fails it with the tail of
stderr. An abort (time limit, stop, lost lock) TERMs the command's process group, then KILLs it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING

from django_qless.core.workers.shutdown import JobAborted

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["ExecFailed", "run_command"]


class ExecFailed(Exception):
    """The command exited with a non-zero status."""


def run_command(command: Sequence[str], grace: float, job: Job) -> None:
    """Run `command ... <jid>` with the job's data on stdin; ExecFailed on a non-zero status."""
    env = {**os.environ, "QLESS_JID": job.jid, "QLESS_QUEUE": job.queue_name,
           "QLESS_KLASS": job.klass_name, "QLESS_WORKER": str(job.worker_name or ""),
           "QLESS_SANDBOX": job.sandbox}
    proc = subprocess.Popen([*command, job.jid], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)
    try:
        _, err = proc.communicate(job.raw_data.encode("utf-8"))
    except BaseException as exc:
        # At its time limit the command may stop cleanly first (TERM, the grace, KILL);
        # on a shutdown or a lost lock it is killed at once.
        timed_out = isinstance(exc, JobAborted) and exc.args[:1] == ("timeout",)
        steps = [(signal.SIGTERM, grace)] if timed_out and grace > 0 else []
        for sig, wait in (*steps, (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                pass
        raise
    if proc.returncode != 0:
        tail = err[-8192:].decode("utf-8", "replace")
        raise ExecFailed(f"{command[0]} exited with status {proc.returncode}\n{tail}")
