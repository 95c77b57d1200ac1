"""Two engine versions on one server, as during a rolling upgrade: jobs put through this
version start at once on a worker that runs the other (its own function library, its own
memory of which queues are empty)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from django_qless.core.engine.lua import function_name
from tests.helpers import ROOT, wait_until

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def other_version(work_dir: Path) -> Path:
    """A copy of the package whose engine differs from ours by one comment line."""
    root = work_dir / "other-version"
    shutil.copytree(ROOT / "django_qless", root / "django_qless",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(root / "django_qless" / "lua" / "base.lua", "a") as fh:
        fh.write("-- the other version\n")
    return root


@pytest.mark.parametrize("processes", ["0", "1"])
def test_jobs_put_by_one_version_start_at_once_on_a_worker_of_the_other(
        qless_client: Any, start_worker: Any, other_version: Path, processes: str) -> None:
    q = qless_client.queues["q"]
    start_worker("q", "-n", processes, "--interval", "30", package_root=other_version)
    warm = q.put("tests.worker.jobs.ok", {})
    wait_until(lambda: qless_client.jobs[warm].state == "complete")
    major = int(qless_client.redis.info("server")["redis_version"].split(".")[0])
    if major >= 7:  # (functions; 6.2 runs both versions' scripts by EVALSHA)
        theirs = subprocess.run(
            [sys.executable, "-c",
             "from django_qless.core.engine.lua import function_name; print(function_name())"],
            cwd=other_version, capture_output=True, text=True, check=True).stdout.strip()
        assert theirs != function_name()
        assert qless_client.redis.function_list(library=theirs)  # the worker's engine
        assert qless_client.redis.function_list(library=function_name())  # the client's
    for _ in range(20):
        # Each job lands in a queue the worker has just found empty and gone idle on. The put
        # runs in this version's library, which cannot end what the worker's library
        # remembers (the queue is empty); only the worker's last look before it sleeps can.
        time.sleep(0.01)
        before = time.time()
        jid = q.put("tests.worker.jobs.ping", {})
        got = qless_client.redis.blpop(["test:pings"], timeout=3)
        assert got is not None, "a job waited for the worker's next safety look"
        ping_jid, started = json.loads(got[1])
        assert ping_jid == jid and started - before < 2.5
