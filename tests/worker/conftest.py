"""Worker test harness: real Redis, real worker subprocesses, real signals, hard timeouts."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import WorkerProcess, alive, children_of, cmdline, wait_until  # noqa: F401 - re-exported

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """A private temp dir (pytest's shared basetemp may be pruned by concurrent runs)."""
    path = Path(tempfile.mkdtemp(prefix="qless-worker-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_worker(redis_url: str, work_dir: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start CLI workers; every one is killed (whole session) at teardown."""
    started: list[WorkerProcess] = []
    tmp_path = work_dir

    def start(*args: str, **options: Any) -> WorkerProcess:
        worker = WorkerProcess(redis_url, list(args), tmp_path, **options)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill_all()
