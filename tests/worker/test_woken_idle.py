"""An idle child woken by a hand-off still honours a signal that came with it.

Woken by a message, the idle loop reserves again without going round the loop's checks
(loop.py `_woken_as_left`); a QUIT that lands in the same wake-up must still keep the
handed job from starting: it goes back to waiting, unstarted, and the worker leaves.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from django_qless.core.client import Client
from tests.worker.conftest import wait_until
from tests.worker.jobs import ledger

pytestmark = pytest.mark.timeout(60)


def _state(pid: int) -> str:
    """Return the process state letter of `pid` (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _pending(pid: int, signum: int) -> bool:
    """Tell whether `signum` is pending for the whole process `pid`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("ShdPnd:"):
            return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    return False


def test_quit_with_a_hand_off_leaves_the_job_unstarted(qless_client: Client, start_worker):
    q = qless_client.queues["q"]
    worker = start_worker("q", "-n", "1")
    kid = worker.wait_children(1)[0]
    warm = q.put("tests.worker.jobs.ok", {})
    wait_until(lambda: qless_client.jobs[warm].state == "complete")
    wait_until(lambda: qless_client.redis.hlen("ql:idle") == 1)  # idle, registered
    os.kill(kid, signal.SIGSTOP)
    wait_until(lambda: _state(kid) == "T")
    jid = q.put("tests.worker.jobs.ok", {})
    # Handed to the stopped child: the message waits on its socket.
    wait_until(lambda: qless_client.jobs[jid].state == "running")
    worker.signal(signal.SIGQUIT)  # the supervisor passes QUIT on to the child
    wait_until(lambda: _pending(kid, signal.SIGQUIT))
    os.kill(kid, signal.SIGCONT)  # the child wakes to the message and the QUIT at once
    assert worker.wait() == 0
    assert ledger(qless_client.redis, "started", jid) == []
    job = qless_client.jobs[jid]
    assert job.state == "waiting"
    assert [h["what"] for h in job.history] == ["put", "popped", "put"]
