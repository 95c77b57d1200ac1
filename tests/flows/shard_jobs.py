"""Jobs for the flows across shards (real workers load them with `--import`).

`add` results in its data's "n" plus what it received, and appends its jid to the file named
by its data's "log" (outside Redis: how often each member ran). With "fail_if" naming a file
that exists it raises; with "die_after_complete" it completes itself through the engine and
SIGKILLs its worker at once (what a worker killed right after a complete leaves behind).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from django_qless.core.flows import RESULT_KEY, received
from django_qless.core.job import Job
from django_qless.core.registry import register

__all__ = ["add"]


@register("tests.flows.shard_jobs.add")
def add(job: Job) -> None:
    """Store n plus the received values as the result; log the run."""
    data: dict[str, Any] = job.data
    with open(data["log"], "a") as log:
        log.write(job.jid + "\n")
    if data.get("fail_if") and Path(data["fail_if"]).exists():
        raise RuntimeError("told to fail")
    value = data.get("n", 0)
    for item in received(job):
        value += sum(item) if isinstance(item, list) else item
    data[RESULT_KEY] = value
    if data.get("die_after_complete"):
        job.client.call("complete", job.jid, job._worker_arg(), job.queue_name,
                        job._data_text(), "token", job.attempt_token)
        os.kill(os.getppid(), signal.SIGKILL)  # the supervisor, then this child
        os.kill(os.getpid(), signal.SIGKILL)
